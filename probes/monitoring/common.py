"""What the monitoring probes share: a URL given to them must not hold a credential, because an artifact records its
parameters as given; credentials come from files (token_file, basic_auth_file) and are never recorded."""

import urllib.parse


def refuse_credential_in_url(art, p):
    """True (the artifact is an error, its url parameter left out) when p["url"] holds user:password@."""
    parts = urllib.parse.urlsplit(p["url"])
    if parts.username is None and parts.password is None:
        return False
    art.params["url"] = "(left out: it held a credential)"
    art.error("url must not hold a credential: put it in token_file or basic_auth_file")
    return True
