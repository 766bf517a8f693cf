"""SigV4 signing of the standard-library S3 client: AWS's published test vector, and botocore's signer on S3
requests (botocore is in the test extra for this)."""

from datetime import datetime, timezone

import pytest

from probes.storage import s3 as storage_s3

WHEN = datetime(2015, 8, 30, 12, 36, 0, tzinfo=timezone.utc)


def test_aws_sigv4_test_suite_get_vanilla():
    # aws-sig-v4-test-suite "get-vanilla": GET / on example.amazonaws.com, service "service"
    headers = storage_s3.sign("GET", "example.amazonaws.com", "/", {}, {}, None, "AKIDEXAMPLE",
                              "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1", "service", WHEN)
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        "SignedHeaders=host;x-amz-date, "
        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
    assert headers["x-amz-date"] == "20150830T123600Z"


@pytest.mark.parametrize("method,path,query,payload", [
    ("PUT", "/bench/clustermax-assess/run 1/h1/small/000001", {}, storage_s3.UNSIGNED),
    ("GET", "/bench", {"list-type": "2", "prefix": "clustermax-assess/r/h1/", "max-keys": "1000",
                       "continuation-token": "a+b/c=="}, storage_s3.EMPTY_SHA256),
    ("DELETE", "/bench/k~x_y-z.w", {}, storage_s3.EMPTY_SHA256),
])
def test_signature_equals_botocore(method, path, query, payload):
    from urllib.parse import quote, urlencode

    from botocore import auth, awsrequest, credentials

    url = "http://127.0.0.1:9000" + quote(path, safe="/~") + ("?" + urlencode(query, quote_via=quote) if query else "")
    req = awsrequest.AWSRequest(method=method, url=url, headers={"X-Amz-Content-SHA256": payload})
    signer = auth.S3SigV4Auth(credentials.Credentials("AKIDTEST", "secret/with+chars"), "s3", "eu-west-1")
    signer.add_auth(req)
    when = datetime.strptime(req.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    # botocore's S3 signer puts the body's hash over plain http whatever it was given: sign the same
    payload = req.headers["X-Amz-Content-SHA256"]
    ours = storage_s3.sign(method, "127.0.0.1:9000", path, query, {}, payload, "AKIDTEST", "secret/with+chars",
                           "eu-west-1", "s3", when)
    assert ours["Authorization"] == req.headers["Authorization"]


def test_client_repr_and_errors_never_show_the_secret():
    c = storage_s3.Client("http://127.0.0.1:1", "AKID", "TOPSECRET-42", timeout=1)
    assert "TOPSECRET" not in repr(c) and "TOPSECRET" not in str(vars(c).get("host_header"))
    with pytest.raises(OSError) as info:
        c.head_bucket("b")
    assert "TOPSECRET" not in str(info.value)
    err = storage_s3.S3Error("GET", 503, "SlowDown", "Please reduce your request rate.")
    assert str(err) == "GET: HTTP 503 SlowDown Please reduce your request rate."


def test_endpoint_must_be_http():
    with pytest.raises(ValueError, match="endpoint"):
        storage_s3.Client("s3.example.com", "a", "b")


def test_a_failed_request_does_not_poison_the_next_one():
    """A request that fails (here: refused, nothing listens yet) must leave the client usable: the next request,
    once the server is up, gets its answer instead of http.client's CannotSendRequest ('Request-sent')."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = storage_s3.Client("http://127.0.0.1:%d" % port, "AKIDTEST", "secret")
    with pytest.raises(ConnectionRefusedError):
        client.request("create", "PUT", "bench")

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert client.request("create", "PUT", "bench")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
