"""The Prometheus endpoint at /_ferry/metrics."""

from __future__ import annotations

import re

import requests

from helpers import s3_client

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+([0-9.eE+-]+|NaN|\+Inf)(?:\s+\d+)?$')


def scrape(server) -> list[tuple[str, dict, float]]:
    r = requests.get(f"{server.url}/_ferry/metrics", timeout=30)
    assert r.status_code == 200, r.text[:300]
    assert r.headers.get("content-type", "").startswith("text/plain"), r.headers
    out = []
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not Prometheus text format: {line!r}"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def value(samples, name, **labels) -> float:
    return sum(v for n, ls, v in samples if n == name and all(ls.get(k) == w for k, w in labels.items()))


def test_metrics_count_requests(ferry):
    srv = ferry("--memory")
    s3 = s3_client(srv)
    s3.create_bucket(Bucket="met")
    s3.put_object(Bucket="met", Key="k", Body=b"x" * 1000)
    before = scrape(srv)
    names = {n for n, _, _ in before}
    assert "ferry_requests_total" in names and "ferry_connections_opened_total" in names, sorted(names)
    for _ in range(3):
        s3.get_object(Bucket="met", Key="k")["Body"].read()
    try:
        s3.get_object(Bucket="met", Key="missing")
    except Exception:
        pass
    after = scrape(srv)
    assert value(after, "ferry_requests_total", op="GetObject", status="200") \
        - value(before, "ferry_requests_total", op="GetObject", status="200") == 3
    assert value(after, "ferry_requests_total", op="GetObject", status="404") >= 1
    assert value(after, "ferry_requests_total", op="PutObject", status="200") >= 1
    assert value(after, "ferry_connections_opened_total") >= 1
