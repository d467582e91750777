"""The admin web console of twisted_broker: Klein pages and JSON over a cluster's registry.

``twistd -n webui --zk HOST:PORT`` serves a whole cluster; ``twistd -n broker --webui
ENDPOINT`` embeds it in a broker, which adds that broker's own statistics. Read-only unless
``--allow-admin-actions``; listens on 127.0.0.1 unless told otherwise. See app.py for the
routes, model.py for where each figure comes from, zk_mirror.py for the watches.
"""
