"""A recording TCP proxy for the seed capture (capture.sh): forwards LISTEN_PORT to
UPSTREAM_PORT on 127.0.0.1 and writes each connection's bytes to OUTDIR/LABEL-N.req
(client to server) and OUTDIR/LABEL-N.resp (server to client), LABEL read from the file
$TAG_FILE when the connection opens. With $TLS_CERT and $TLS_KEY it terminates TLS, so
what clients send only over HTTPS (botocore's aws-chunked uploads) is recorded in clear.

usage: record.py LISTEN_PORT UPSTREAM_PORT OUTDIR"""
import socket, threading, sys, os, itertools
listen_port, upstream_port, outdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.makedirs(outdir, exist_ok=True)
counter = itertools.count()
def pump(src, dst, f):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            f.write(b); f.flush()
            dst.sendall(b)
    except OSError:
        pass
    finally:
        try: dst.shutdown(socket.SHUT_WR)
        except OSError: pass
def handle(c):
    n = next(counter)
    u = socket.create_connection(("127.0.0.1", upstream_port))
    tag = os.environ.get("TAG_FILE")
    label = open(tag).read().strip() if tag and os.path.exists(tag) else "x"
    f1 = open(f"{outdir}/{label}-{n:03d}.req", "wb"); f2 = open(f"{outdir}/{label}-{n:03d}.resp", "wb")
    t1 = threading.Thread(target=pump, args=(c, u, f1)); t2 = threading.Thread(target=pump, args=(u, c, f2))
    t1.start(); t2.start(); t1.join(); t2.join(); c.close(); u.close()
import ssl
ctx = None
if os.environ.get("TLS_CERT"):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(os.environ["TLS_CERT"], os.environ["TLS_KEY"])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", listen_port)); s.listen(64)
print("proxy ready", flush=True)
while True:
    c, _ = s.accept()
    if ctx:
        try: c = ctx.wrap_socket(c, server_side=True)
        except Exception as e: print("tls", e, flush=True); continue
    threading.Thread(target=handle, args=(c,), daemon=True).start()
