"""Who may reach or read what: the bus's permissions (``permissions``), keypairs' secrets
(``keys``, ``throttle``), the doors' audit (``access_audit``), the read API's scopes
(``visibility``), sessions' channels (``session_access``) and the domains of the log's
records (``event_domains``)."""
