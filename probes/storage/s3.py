"""A minimal S3 client on the standard library: AWS Signature Version 4 (hmac, hashlib) over http.client.

Path-style requests (``<endpoint>/<bucket>/<key>``), which every S3-compatible store accepts. Payloads are sent as
UNSIGNED-PAYLOAD, so a large PUT is not hashed twice. The secret key is used only to derive the signing key and
never appears in a request, an exception message or a log line.
"""

import hashlib
import hmac
import http.client
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from urllib.parse import quote, urlsplit
from xml.sax.saxutils import escape as xml_escape

UNSIGNED = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class S3Error(RuntimeError):
    def __init__(self, op, status, code, message=""):
        self.op, self.status, self.code = op, status, code
        super().__init__(("%s: HTTP %s %s %s" % (op, status, code or "", message or "")).strip())


def _uri_encode(text, keep_slash):
    return quote(text, safe="/~" if keep_slash else "~")


def canonical_query(query):
    return "&".join("%s=%s" % (_uri_encode(k, False), _uri_encode(str(v), False))
                    for k, v in sorted((query or {}).items()))


def _hmac(key, msg):
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret, date, region, service):
    key = _hmac(("AWS4" + secret).encode("utf-8"), date)
    key = _hmac(key, region)
    key = _hmac(key, service)
    return _hmac(key, "aws4_request")


def sign(method, host, path, query, headers, payload_hash, access_key, secret_key, region, service="s3",
         when=None):
    """Headers to add (Authorization, x-amz-date, x-amz-content-sha256) for one request.
    `path` is the raw path (it is URI-encoded here, '/' kept); `headers` are the other headers to sign."""
    when = when or datetime.now(timezone.utc)
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    date = amz_date[:8]
    signed = {k.lower().strip(): " ".join(str(v).split()) for k, v in (headers or {}).items()}
    signed["host"] = host
    signed["x-amz-date"] = amz_date
    if payload_hash is not None:
        signed["x-amz-content-sha256"] = payload_hash
    names = sorted(signed)
    canonical = "\n".join([
        method,
        _uri_encode(path or "/", True),
        canonical_query(query),
        "".join("%s:%s\n" % (n, signed[n]) for n in names),
        ";".join(names),
        payload_hash if payload_hash is not None else EMPTY_SHA256,
    ])
    scope = "%s/%s/%s/aws4_request" % (date, region, service)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
    signature = hmac.new(signing_key(secret_key, date, region, service), to_sign.encode("utf-8"),
                         hashlib.sha256).hexdigest()
    out = {"x-amz-date": amz_date,
           "Authorization": "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s"
                            % (access_key, scope, ";".join(names), signature)}
    if payload_hash is not None:
        out["x-amz-content-sha256"] = payload_hash
    return out


class Client:
    """One keep-alive connection to an S3 endpoint (use one Client per thread)."""

    def __init__(self, endpoint, access_key, secret_key, region="us-east-1", timeout=60, verify_tls=True):
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("endpoint must be http(s)://host[:port], got %r" % endpoint)
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.host_header = parts.netloc
        self.prefix = parts.path.rstrip("/")
        self.region, self.timeout = region, timeout
        self._access, self._secret = access_key, secret_key
        self._verify = verify_tls
        self._conn = None

    def __repr__(self):  # never shows the keys
        return "<s3.Client %s://%s>" % (self.scheme, self.host_header)

    def _connection(self):
        if self._conn is None:
            if self.scheme == "https":
                import ssl  # noqa: PLC0415

                ctx = ssl.create_default_context()
                if not self._verify:
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
                self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=ctx)
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, op, method, bucket, key="", query=None, body=None, length=None, headers=None,
                sink=None, ok=(200, 204)):
        """(status, headers dict, body bytes or None, ttfb seconds). `body` bytes or an iterable of bytes chunks
        with `length`; `sink`: a callable given each chunk of the response body instead of keeping it."""
        path = "%s/%s" % (self.prefix, bucket) + ("/" + key if key else "")
        hdrs = dict(headers or {})
        if body is not None:
            hdrs["Content-Length"] = str(length if length is not None else len(body))
        elif method in ("POST", "PUT"):
            hdrs["Content-Length"] = "0"  # putrequest does not add it, and proxies answer 411 without it
        hdrs.update(sign(method, self.host_header, path, query, {}, UNSIGNED if body is not None else EMPTY_SHA256,
                         self._access, self._secret, self.region))
        url = _uri_encode(path, True) + ("?" + canonical_query(query) if query else "")
        for attempt in (0, 1):
            conn = self._connection()
            try:
                t0 = time.perf_counter()
                conn.putrequest(method, url, skip_host=True, skip_accept_encoding=True)
                conn.putheader("Host", self.host_header)
                for k, v in hdrs.items():
                    conn.putheader(k, v)
                conn.endheaders()
                if body is not None:
                    if isinstance(body, (bytes, bytearray, memoryview)):
                        conn.send(body)
                    else:
                        for chunk in body:
                            conn.send(chunk)
                resp = conn.getresponse()
                ttfb = time.perf_counter() - t0
                data = None
                if sink is not None and resp.status in ok:
                    while True:
                        chunk = resp.read(1 << 20)
                        if not chunk:
                            break
                        sink(chunk)
                else:
                    data = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A kept-alive connection the server closed meanwhile: one retry on a new one.
                self.close()
                if attempt or not isinstance(body, (bytes, bytearray, memoryview, type(None))):
                    raise
            except BaseException:
                # Refused, timed out, interrupted: a request left half-sent makes the connection refuse every
                # later one (CannotSendRequest), so the next request starts on a new connection.
                self.close()
                raise
        if resp.status not in ok:
            code, message = _error_code(data)
            raise S3Error(op, resp.status, code, message)
        return resp.status, dict(resp.getheaders()), data, ttfb

    # -- operations -------------------------------------------------------------------------------------

    def put(self, bucket, key, body, length=None):
        return self.request("PUT", "PUT", bucket, key, body=body, length=length, ok=(200,))

    def get(self, bucket, key, sink=None):
        return self.request("GET", "GET", bucket, key, sink=sink, ok=(200,))

    def delete(self, bucket, key):
        return self.request("DELETE", "DELETE", bucket, key, ok=(200, 204))

    # multipart upload (CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload)

    def create_multipart(self, bucket, key):
        """The UploadId of a new multipart upload of key."""
        _, _, data, _ = self.request("CREATE multipart", "POST", bucket, key, query={"uploads": ""}, ok=(200,))
        upload_id = _find(data, "UploadId")
        if not upload_id:
            raise S3Error("CREATE multipart", 200, None, "no UploadId in the response: %r" % (data or b"")[:200])
        return upload_id

    def upload_part(self, bucket, key, upload_id, number, body, length=None):
        """The part's ETag (as the server quotes it: CompleteMultipartUpload sends it back unchanged)."""
        _, headers, _, _ = self.request("UPLOAD part", "PUT", bucket, key, query={"partNumber": str(number),
                                                                                  "uploadId": upload_id},
                                        body=body, length=length, ok=(200,))
        etag = {k.lower(): v for k, v in headers.items()}.get("etag")
        if not etag:
            raise S3Error("UPLOAD part", 200, None, "part %d of %s came back without an ETag" % (number, key))
        return etag

    def complete_multipart(self, bucket, key, upload_id, etags):
        """etags: the parts' ETags in part order (part numbers 1, 2, ...). S3 can answer 200 with an <Error> body
        when the assembly fails after the response began: that is an error here too."""
        body = ("<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
            "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (n, xml_escape(etag))
            for n, etag in enumerate(etags, 1))).encode()
        _, _, data, _ = self.request("COMPLETE multipart", "POST", bucket, key, query={"uploadId": upload_id},
                                     body=body, ok=(200,))
        root = _xml(data)
        if root is not None and root.tag.rsplit("}", 1)[-1] == "Error":
            raise S3Error("COMPLETE multipart", 200, root.findtext("Code"), root.findtext("Message") or "")
        return data

    def abort_multipart(self, bucket, key, upload_id):
        return self.request("ABORT multipart", "DELETE", bucket, key, query={"uploadId": upload_id},
                            ok=(200, 204))

    def multipart_uploads(self, bucket, prefix):
        """[(key, upload id)] of the multipart uploads in progress under prefix (ListMultipartUploads, first
        1000)."""
        _, _, data, _ = self.request("LIST multipart", "GET", bucket, query={"uploads": "", "prefix": prefix},
                                     ok=(200,))
        root = _xml(data)
        if root is None:
            return []
        ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
        return [(el.findtext(ns + "Key"), el.findtext(ns + "UploadId")) for el in root.findall(ns + "Upload")]

    def head_bucket(self, bucket):
        return self.request("HEAD bucket", "HEAD", bucket, ok=(200,))

    def list(self, bucket, prefix, page_size=1000):
        """Every key under prefix (ListObjectsV2, paginated): (keys, pages)."""
        keys, token, pages = [], None, 0
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": str(page_size)}
            if token:
                query["continuation-token"] = token
            _, _, data, _ = self.request("LIST", "GET", bucket, query=query, ok=(200,))
            pages += 1
            root = ET.fromstring(data)
            ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
            keys += [el.findtext(ns + "Key") for el in root.findall(ns + "Contents")]
            truncated = (root.findtext(ns + "IsTruncated") or "false").lower() == "true"
            token = root.findtext(ns + "NextContinuationToken")
            if not truncated or not token:
                return keys, pages


def _xml(data):
    try:
        return ET.fromstring(data or b"")
    except ET.ParseError:
        return None


def _find(data, name):
    """The text of the first element called name anywhere in an XML answer (any namespace), or None."""
    root = _xml(data)
    if root is None:
        return None
    for el in root.iter():
        if el.tag.rsplit("}", 1)[-1] == name:
            return el.text
    return None


def _error_code(data):
    try:
        root = ET.fromstring(data or b"")
        return root.findtext("Code"), root.findtext("Message")
    except ET.ParseError:
        return None, (data or b"")[:200].decode("utf-8", "replace")
