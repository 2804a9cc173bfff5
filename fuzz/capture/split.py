"""Splits recorded connections (NAME.req / NAME.resp, from record.py) into seed corpora,
one directory per fuzz target, each seed named after what it came from: whole requests
and the pipelined sequence of a connection (server_h1), request heads (sigv4), chunked
and aws-chunked bodies (chunked, aws_chunked), XML bodies both ways (xml), Range and
Content-Range values (range), responses and a connection's sequence of them (wire_h1).
Seeds over 4 KiB are left out.

usage: split.py CAPTURE_DIR CORPUS_DIR"""
import os, re, sys, hashlib
cap, out = sys.argv[1], sys.argv[2]
MAX = 4096

def messages(data, is_request):
    """Yields (head, body, raw) of each HTTP/1.1 message in a connection's bytes."""
    at = 0
    while at < len(data):
        end = data.find(b"\r\n\r\n", at)
        if end < 0:
            return
        head = data[at:end + 4]
        lines = head.split(b"\r\n")
        fields = {}
        for l in lines[1:]:
            if b":" in l:
                k, v = l.split(b":", 1)
                fields.setdefault(k.strip().lower().decode(), []).append(v.strip())
        pos = end + 4
        status = None
        if not is_request:
            status = int(lines[0].split()[1])
        body_start = pos
        if not is_request and (status < 200 or status in (204, 304)):
            pass
        elif b"chunked" in b",".join(fields.get("transfer-encoding", [])).lower():
            while True:
                le = data.find(b"\r\n", pos)
                size = int(data[pos:le].split(b";")[0], 16)
                pos = le + 2 + size + 2
                if size == 0:
                    # trailers until an empty line
                    pos -= 2
                    while True:
                        le = data.find(b"\r\n", pos)
                        line = data[pos:le]
                        pos = le + 2
                        if not line:
                            break
                    break
        else:
            n = int(fields.get("content-length", [b"0"])[0])
            # a HEAD answer: Content-Length without a body (next message starts right away)
            if not is_request and data[pos:pos + 5] == b"HTTP/" and n > 0:
                n = 0
            pos += n
        yield head, fields, data[body_start:pos], data[at:pos]
        at = pos

def safe(data, is_request):
    got = []
    try:
        for m in messages(data, is_request):
            got.append(m)
    except (ValueError, IndexError) as e:
        print("stopped parsing:", e, file=sys.stderr)
    return got

def dechunk(body):
    out, pos = b"", 0
    while True:
        le = body.find(b"\r\n", pos)
        size = int(body[pos:le].split(b";")[0], 16)
        if size == 0:
            return out
        out += body[le + 2:le + 2 + size]
        pos = le + 2 + size + 2

def save(target, name, data):
    if not data or len(data) > MAX:
        return
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    h = hashlib.sha1(data).hexdigest()[:8]
    open(os.path.join(d, f"{name}-{h}"), "wb").write(data)

for f in sorted(os.listdir(cap)):
    path = os.path.join(cap, f)
    data = open(path, "rb").read()
    name = f.rsplit(".", 1)[0]
    if f.endswith(".req"):
        msgs = safe(data, True)
        prefix = b""
        for i, (head, fields, body, raw) in enumerate(msgs):
            method = head.split(b" ", 1)[0].decode()
            save("server_h1", f"{name}-{i}-{method}", raw)
            if len(prefix) + len(raw) <= MAX:
                prefix += raw
            save("sigv4", f"{name}-{i}-{method}", head)
            for v in fields.get("range", []):
                save("range", f"{name}-{i}-range", v)
            te = b",".join(fields.get("transfer-encoding", [])).lower()
            sha = b"".join(fields.get("x-amz-content-sha256", []))
            ce = b",".join(fields.get("content-encoding", [])).lower()
            if b"chunked" in te:
                save("chunked", f"{name}-{i}", body)
                if sha.startswith(b"STREAMING-") or b"aws-chunked" in ce:
                    save("aws_chunked", f"{name}-{i}", dechunk(body))
            elif sha.startswith(b"STREAMING-") or b"aws-chunked" in ce:
                save("aws_chunked", f"{name}-{i}", body)
            elif body.lstrip().startswith(b"<"):
                save("xml", f"{name}-{i}-request", body)
        if len(msgs) > 1:
            save("server_h1", f"{name}-pipelined", prefix)
    elif f.endswith(".resp"):
        msgs = safe(data, False)
        prefix = b""
        for i, (head, fields, body, raw) in enumerate(msgs):
            status = head.split(b" ")[1].decode()
            save("wire_h1", f"{name}-{i}-{status}", raw)
            if len(prefix) + len(raw) <= MAX:
                prefix += raw
            for v in fields.get("content-range", []):
                save("range", f"{name}-{i}-content-range", v)
            if body.lstrip().startswith(b"<"):
                save("xml", f"{name}-{i}-{status}", body)
        if len(msgs) > 1:
            save("wire_h1", f"{name}-pipelined", prefix)
