"""SCRAM credentials: Kafka's text form, RFC 7677's test vector, PLAIN's check, the decoys."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from twisted_broker.security.scram import (
    SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, decoy_credential, make_credential, password_matches,
)


def test_text_form_is_kafkas_and_reads_back():
    credential = ScramCredential(b"salt-bytes", b"\x01" * 32, b"\x02" * 32, 4096)
    text = credential.to_text()
    assert text == ("salt=c2FsdC1ieXRlcw==,stored_key=AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=,"
                    "server_key=AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=,iterations=4096")
    assert ScramCredential.from_text(text) == credential


@pytest.mark.parametrize("text", ["", "salt=AA==", "salt=!!,stored_key=AA==,server_key=AA==,iterations=4096",
                                  "salt=AA==,stored_key=AA==,server_key=AA==,iterations=x", "garbage"])
def test_text_that_is_not_a_credential_raises_value_error(text):
    with pytest.raises(ValueError):
        ScramCredential.from_text(text)


def test_keys_follow_rfc_5802():
    salt = b"0123456789abcdef"
    credential = make_credential(SCRAM_SHA_512, "pencil", iterations=4096, salt=salt)
    salted = hashlib.pbkdf2_hmac("sha512", b"pencil", salt, 4096)
    assert credential.stored_key == hashlib.sha512(hmac.new(salted, b"Client Key", "sha512").digest()).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha512").digest()
    # RFC 7677's SCRAM-SHA-256 example: salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 rounds, "pencil"
    vector = make_credential(SCRAM_SHA_256, "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    assert base64.b64encode(vector.server_key) == b"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="


def test_password_matches_only_the_right_password():
    credential = make_credential(SCRAM_SHA_256, "s3cret")
    assert password_matches(SCRAM_SHA_256, credential, b"s3cret")
    assert not password_matches(SCRAM_SHA_256, credential, b"s3cret ")
    assert not password_matches(SCRAM_SHA_512, credential, b"s3cret")


@pytest.mark.parametrize("iterations", [1, 4095, 16385])
def test_iterations_outside_kafkas_bounds_are_refused(iterations):
    with pytest.raises(ValueError):
        make_credential(SCRAM_SHA_256, "pw", iterations=iterations)
    cheap = ScramCredential(b"s" * 16, b"k" * 32, b"k" * 32, iterations)
    assert not password_matches(SCRAM_SHA_256, cheap, b"pw")


def test_decoys_are_stable_per_user_and_secret():
    first = decoy_credential(SCRAM_SHA_256, "nobody", b"secret")
    assert first == decoy_credential(SCRAM_SHA_256, "nobody", b"secret")
    assert first != decoy_credential(SCRAM_SHA_256, "nobody", b"other")
    assert first.salt != decoy_credential(SCRAM_SHA_256, "somebody", b"secret").salt
