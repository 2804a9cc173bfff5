"""`ferry cp s3://... s3://...` end to end against `ferry serve`: above --part-size the
copy goes through parallel UploadPartCopy (as the AWS CLI does above its
multipart_threshold) and keeps the source's checksum; with server faults, every run
either copies exactly or leaves no object and no upload in progress."""

from __future__ import annotations

import json

from helpers import s3_client
from test_cli import Ferry, cli_env, fy, metric  # noqa: F401 (fy is a fixture)

MIB = 1024 * 1024


def stat(fy, url):
    return json.loads(fy("--json", "stat", url).out)


def test_copy_in_parts_keeps_the_source_checksum(fy, bucket, mem_server):
    src = "s3://synthetic/40MiB/copy-me"
    before = metric(mem_server, "ferry_requests_total", op="UploadPartCopy", status="200")
    p = fy("--json", "cp", "--part-size", "5MiB", src, f"s3://{bucket}/copied")
    assert json.loads(p.out)["size"] == 40 * MIB
    assert metric(mem_server, "ferry_requests_total", op="UploadPartCopy", status="200") - before == 8
    theirs, ours = stat(fy, src), stat(fy, f"s3://{bucket}/copied")
    assert ours["size"] == theirs["size"] == 40 * MIB
    crc = theirs["checksums"]["CRC32C"]
    assert crc and ours["checksums"]["CRC32C"] == crc, (theirs, ours)
    assert s3_client(mem_server).list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    # Below the threshold: one CopyObject.
    before = metric(mem_server, "ferry_requests_total", op="CopyObject", status="200")
    fy("cp", "s3://synthetic/1MiB/small", f"s3://{bucket}/small")
    assert metric(mem_server, "ferry_requests_total", op="CopyObject", status="200") - before == 1


def test_copy_failing_midway_leaves_nothing(ferry, tmp_path):
    """500s on 60% of requests: Create is not retried, parts are (5 attempts), so some
    runs fail after Create. Each run either copied exactly or left nothing behind."""
    srv = ferry("--memory", "--fault-500-rate", "0.6", "--seed", "5")
    fy = Ferry(cli_env(srv, tmp_path), tmp_path)
    check = s3_client(srv, retries=40)
    check.create_bucket(Bucket="dst")
    src = "s3://synthetic/60MiB/src"
    want = check.head_object(Bucket="synthetic", Key="60MiB/src", ChecksumMode="ENABLED")["ChecksumCRC32C"]
    failed_midway = copied = 0
    for run in range(40):
        created = metric(srv, "ferry_requests_total", op="CreateMultipartUpload", status="200")
        p = fy("cp", "--part-size", "5MiB", src, f"s3://dst/k{run}", check=False)
        began = metric(srv, "ferry_requests_total", op="CreateMultipartUpload", status="200") > created
        if p.returncode == 0:
            got = check.head_object(Bucket="dst", Key=f"k{run}", ChecksumMode="ENABLED")
            assert (got["ContentLength"], got["ChecksumCRC32C"]) == (60 * MIB, want)
            copied += 1
        else:
            assert p.returncode == 1, p.err
            assert "ferry: error: cp s3://synthetic/60MiB/src" in p.err
            keys = [o["Key"] for o in check.list_objects_v2(Bucket="dst").get("Contents", [])]
            assert f"k{run}" not in keys, "a failed copy left an object"
            failed_midway += began
        assert check.list_multipart_uploads(Bucket="dst").get("Uploads", []) == [], f"run {run} left an upload"
        if failed_midway >= 2 and copied >= 1:
            break
    assert failed_midway >= 2 and copied >= 1, (failed_midway, copied)
