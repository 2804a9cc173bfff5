"""A signed aws-chunked body (STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER), chained from the
seed signature the aws_chunked fuzz target verifies with, so its signatures verify there."""
import hmac, hashlib, sys
def h(k, m): return hmac.new(k, m.encode() if isinstance(m, str) else m, hashlib.sha256).digest()
key = h(h(h(h(b"AWS4ferry-secret", "20260101"), "us-east-1"), "s3"), "aws4_request")
ts, scope = "20260101T000000Z", "20260101/us-east-1/s3/aws4_request"
prev = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
EMPTY = hashlib.sha256(b"").hexdigest()
out = b""
def frame(data):
    global prev, out
    sts = f"AWS4-HMAC-SHA256-PAYLOAD\n{ts}\n{scope}\n{prev}\n{EMPTY}\n{hashlib.sha256(data).hexdigest()}"
    prev = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    out += f"{len(data):x};chunk-signature={prev}\r\n".encode() + data + b"\r\n"
for piece in [b"signed streaming ", b"payload, two chunks"]:
    frame(piece)
frame(b"")
out = out[:-2]
trailers = [("x-amz-checksum-crc32c", "sOO8/Q==")]
canon = "".join(f"{k}:{v}\n" for k, v in trailers)
sts = f"AWS4-HMAC-SHA256-TRAILER\n{ts}\n{scope}\n{prev}\n{hashlib.sha256(canon.encode()).hexdigest()}"
tsig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
out += f"x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{tsig}\r\n\r\n".encode()
sys.stdout.buffer.write(out)
