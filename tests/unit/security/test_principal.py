"""A client certificate's principal is Kafka's: ``User:`` + the subject in RFC 2253 order."""

from __future__ import annotations

import trustme
from cryptography import x509

from twisted_broker.security.principal import certificate_principal


def test_principal_is_the_subject_most_specific_first():
    ca = trustme.CA()
    leaf = ca.issue_cert("alice.example", organization_name="corp", organization_unit_name="eng",
                         common_name="alice")
    certificate = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes())
    assert certificate_principal(certificate) == "User:CN=alice,OU=eng,O=corp"
