"""boto3 against `ferry serve`: the S3 API surface, checked byte for byte."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import urllib.parse
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from helpers import (b64, client_error_code, crc32c, file_sha256, payload, s3_client, sha256)

MiB = 1024 * 1024


def put(s3, bucket, key, data, **kw):
    return s3.put_object(Bucket=bucket, Key=key, Body=data, **kw)


def get_bytes(s3, bucket, key, **kw) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key, **kw)["Body"].read()


def expect_error(status, code, fn, *a, **kw):
    with pytest.raises(ClientError) as ei:
        fn(*a, **kw)
    got = client_error_code(ei.value)
    assert got[0] == status and (code is None or got[1] == code), f"expected {status} {code}, got {got}"
    return ei.value


# -- buckets ---------------------------------------------------------------------------
def test_bucket_lifecycle(s3):
    name = "lifecycle-bucket"
    s3.create_bucket(Bucket=name)
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    put(s3, name, "k", b"x")
    expect_error(409, "BucketNotEmpty", s3.delete_bucket, Bucket=name)
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    expect_error(404, None, s3.head_bucket, Bucket=name)


def test_no_such_bucket_and_key(s3, bucket):
    expect_error(404, "NoSuchBucket", s3.get_object, Bucket="no-such-bucket-here", Key="k")
    expect_error(404, "NoSuchBucket", s3.list_objects_v2, Bucket="no-such-bucket-here")
    expect_error(404, "NoSuchKey", s3.get_object, Bucket=bucket, Key="missing")
    expect_error(404, None, s3.head_object, Bucket=bucket, Key="missing")


# -- put / get / range ----------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 1, 1000, 256 * 1024 + 7])
def test_put_get_roundtrip(s3, bucket, size):
    data = payload(size, 11)
    r = put(s3, bucket, "obj", data)
    assert r["ETag"].strip('"') == hashlib.md5(data).hexdigest()
    got = get_bytes(s3, bucket, "obj")
    assert sha256(got) == sha256(data)
    head = s3.head_object(Bucket=bucket, Key="obj")
    assert head["ContentLength"] == size
    assert head["ETag"] == r["ETag"]


def test_unicode_key_small_object(s3, bucket):
    key = "dir/ünïcødé — 日本語 🚀/file name (1).txt"
    data = payload(200, 3)
    put(s3, bucket, key, data)
    assert get_bytes(s3, bucket, key) == data
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == [key]


def test_range_get(s3, bucket):
    data = payload(1000, 5)
    put(s3, bucket, "r", data)
    for rng, expect, content_range in [
        ("bytes=0-99", data[0:100], "bytes 0-99/1000"),
        ("bytes=100-199", data[100:200], "bytes 100-199/1000"),
        ("bytes=990-", data[990:], "bytes 990-999/1000"),
        ("bytes=-10", data[-10:], "bytes 990-999/1000"),
        ("bytes=900-5000", data[900:], "bytes 900-999/1000"),
    ]:
        r = s3.get_object(Bucket=bucket, Key="r", Range=rng)
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
        assert r["ContentRange"] == content_range, rng
        assert r["Body"].read() == expect, rng
    expect_error(416, "InvalidRange", s3.get_object, Bucket=bucket, Key="r", Range="bytes=1000-2000")


# -- listing ------------------------------------------------------------------------------------
def test_list_v2_pagination(s3, bucket):
    keys = sorted(f"k/{i:03d}" for i in range(25))
    for k in keys:
        put(s3, bucket, k, k.encode())
    seen, token, pages = [], None, 0
    while True:
        kw = {"ContinuationToken": token} if token else {}
        r = s3.list_objects_v2(Bucket=bucket, MaxKeys=7, **kw)
        pages += 1
        assert r["KeyCount"] == len(r.get("Contents", []))
        assert r["KeyCount"] <= 7
        seen += [o["Key"] for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
        token = r["NextContinuationToken"]
    assert seen == keys
    assert pages == 4
    # sizes and etags are reported
    r = s3.list_objects_v2(Bucket=bucket, Prefix="k/00")
    assert [o["Key"] for o in r["Contents"]] == keys[:10]
    assert all(o["Size"] == 5 for o in r["Contents"])
    assert r["Contents"][0]["ETag"].strip('"') == hashlib.md5(b"k/000").hexdigest()


def test_list_v2_paginator_and_start_after(s3, bucket):
    keys = sorted(f"p{i:02d}" for i in range(12))
    for k in keys:
        put(s3, bucket, k, b"")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 5})
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == keys
    r = s3.list_objects_v2(Bucket=bucket, StartAfter="p05")
    assert [o["Key"] for o in r["Contents"]] == keys[6:]


def test_list_v2_delimiter(s3, bucket):
    for k in ["a/1", "a/2", "a/b/3", "b/1", "c", "d.txt"]:
        put(s3, bucket, k, b"x")
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["a/", "b/"]
    assert [o["Key"] for o in r["Contents"]] == ["c", "d.txt"]
    assert r["KeyCount"] == 4
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/", Prefix="a/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["a/b/"]
    assert [o["Key"] for o in r["Contents"]] == ["a/1", "a/2"]
    # pagination across common prefixes
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/", MaxKeys=1)
    assert r["IsTruncated"] and r["KeyCount"] == 1
    r2 = s3.list_objects_v2(Bucket=bucket, Delimiter="/", MaxKeys=10, ContinuationToken=r["NextContinuationToken"])
    got = [p["Prefix"] for p in r.get("CommonPrefixes", []) + r2.get("CommonPrefixes", [])]
    got += [o["Key"] for o in r.get("Contents", []) + r2.get("Contents", [])]
    assert sorted(got) == ["a/", "b/", "c", "d.txt"]


ODD_KEYS = ["a b", "plus+sign", "amp&lt<gt>", "pct%20x", "quote'\"", "ünï/日本", "new\nline", "tab\tkey", "~tilde"]


def test_list_v2_encoding_type_url(s3, bucket):
    for k in ODD_KEYS:
        put(s3, bucket, k, k.encode())
    # Explicit EncodingType=url: botocore leaves the keys encoded.
    r = s3.list_objects_v2(Bucket=bucket, EncodingType="url")
    assert r.get("EncodingType") == "url"
    raw = [o["Key"] for o in r["Contents"]]
    assert all("\n" not in k and " " not in k for k in raw), raw
    # botocore decodes with unquote_plus, so a literal '+' must come back as %2B.
    assert sorted(urllib.parse.unquote_plus(k) for k in raw) == sorted(ODD_KEYS), raw
    # Default: botocore asks for url encoding itself and decodes the answer.
    r = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in r["Contents"]] == sorted(ODD_KEYS, key=lambda k: k.encode())
    for k in ODD_KEYS:
        assert get_bytes(s3, bucket, k) == k.encode()


def test_list_v1_marker(s3, bucket):
    keys = sorted(f"m{i:02d}" for i in range(13))
    for k in keys:
        put(s3, bucket, k, b"1")
    seen, marker = [], ""
    while True:
        r = s3.list_objects(Bucket=bucket, MaxKeys=5, Marker=marker)
        page = [o["Key"] for o in r.get("Contents", [])]
        seen += page
        if not r["IsTruncated"]:
            break
        marker = r.get("NextMarker") or page[-1]
    assert seen == keys
    r = s3.list_objects(Bucket=bucket, Marker="m10")
    assert [o["Key"] for o in r["Contents"]] == keys[11:]
    r = s3.list_objects(Bucket=bucket, Delimiter="/", Prefix="m0")
    assert len(r["Contents"]) == 10


# -- delete ---------------------------------------------------------------------------------------
def test_delete_object(s3, bucket):
    put(s3, bucket, "d", b"bye")
    s3.delete_object(Bucket=bucket, Key="d")
    expect_error(404, "NoSuchKey", s3.get_object, Bucket=bucket, Key="d")
    # deleting a missing key is not an error in S3
    assert s3.delete_object(Bucket=bucket, Key="d")["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_delete_objects_batch_1000(s3, bucket):
    keys = [f"batch/{i:04d}" for i in range(1000)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: put(s3, bucket, k, b"x"), keys))
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[:500]]})
    assert sorted(d["Key"] for d in r["Deleted"]) == keys[:500]
    assert not r.get("Errors")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[500:]], "Quiet": True})
    assert not r.get("Deleted") and not r.get("Errors")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    # 1,000 keys in one request, most of them already gone
    put(s3, bucket, "batch/0000", b"x")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert len(r["Deleted"]) == 1000
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# -- multipart ----------------------------------------------------------------------------------
def test_upload_file_multipart(s3, bucket, tmp_path):
    src = tmp_path / "big.bin"
    data = payload(23 * MiB, 7)
    src.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=4)
    s3.upload_file(str(src), bucket, "big.bin", Config=cfg)
    head = s3.head_object(Bucket=bucket, Key="big.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-5"'), head["ETag"]
    parts = [data[i:i + 5 * MiB] for i in range(0, len(data), 5 * MiB)]
    expect = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-5"
    assert head["ETag"].strip('"') == expect
    dst = tmp_path / "back.bin"
    s3.download_file(bucket, "big.bin", str(dst), Config=cfg)
    assert file_sha256(dst) == sha256(data)


def test_multipart_low_level(s3, bucket):
    p1, p2 = payload(5 * MiB, 1), payload(1024, 2)
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ContentType="application/x-test",
                                    Metadata={"origin": "lowlevel"})
    uid = up["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=1, Body=p1)["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=2, Body=p2)["ETag"]
    assert e1.strip('"') == hashlib.md5(p1).hexdigest()
    parts = s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in parts] == [(1, e1, len(p1)), (2, e2, len(p2))]
    uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("mp", uid)]
    # not visible until complete
    expect_error(404, "NoSuchKey", s3.get_object, Bucket=bucket, Key="mp")
    r = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert r["ETag"].endswith('-2"')
    got = s3.get_object(Bucket=bucket, Key="mp")
    assert sha256(got["Body"].read()) == sha256(p1 + p2)
    assert got["ContentType"] == "application/x-test"
    assert got["Metadata"] == {"origin": "lowlevel"}
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_multipart_abort(s3, bucket):
    uid = s3.create_multipart_upload(Bucket=bucket, Key="ab")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="ab", UploadId=uid, PartNumber=1, Body=b"abc")
    s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=uid)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    expect_error(404, "NoSuchUpload", s3.list_parts, Bucket=bucket, Key="ab", UploadId=uid)
    expect_error(404, "NoSuchKey", s3.get_object, Bucket=bucket, Key="ab")


def test_multipart_invalid_part(s3, bucket):
    uid = s3.create_multipart_upload(Bucket=bucket, Key="ip")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="ip", UploadId=uid, PartNumber=1, Body=b"abc")
    wrong = '"' + "0" * 32 + '"'
    expect_error(400, "InvalidPart", s3.complete_multipart_upload, Bucket=bucket, Key="ip", UploadId=uid,
                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": wrong}]})
    s3.abort_multipart_upload(Bucket=bucket, Key="ip", UploadId=uid)


def test_multipart_entity_too_small(s3, bucket):
    uid = s3.create_multipart_upload(Bucket=bucket, Key="ts")["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key="ts", UploadId=uid, PartNumber=1, Body=b"a" * 1024)["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key="ts", UploadId=uid, PartNumber=2, Body=b"b" * 1024)["ETag"]
    expect_error(400, "EntityTooSmall", s3.complete_multipart_upload, Bucket=bucket, Key="ts", UploadId=uid,
                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    s3.abort_multipart_upload(Bucket=bucket, Key="ts", UploadId=uid)


def test_multipart_full_object_crc32(s3, bucket):
    """FULL_OBJECT: the server combines the parts' CRCs into the whole object's CRC, checks
    the one the client states on Complete, and returns it on GET/HEAD."""
    parts = [payload(5 * MiB, 21), payload(5 * MiB, 22), payload(1234, 23)]
    whole = b"".join(parts)
    want = b64(zlib.crc32(whole).to_bytes(4, "big"))
    up = s3.create_multipart_upload(Bucket=bucket, Key="full", ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")
    done = []
    for i, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bucket, Key="full", UploadId=up["UploadId"], PartNumber=i, Body=p, ChecksumAlgorithm="CRC32")
        done.append({"PartNumber": i, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    r = s3.complete_multipart_upload(Bucket=bucket, Key="full", UploadId=up["UploadId"], MultipartUpload={"Parts": done},
                                     ChecksumCRC32=want, ChecksumType="FULL_OBJECT")
    assert r["ChecksumCRC32"] == want
    head = s3.head_object(Bucket=bucket, Key="full", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32"] == want and head["ChecksumType"] == "FULL_OBJECT"
    assert get_bytes(s3, bucket, "full") == whole


def test_multipart_full_object_wrong_crc_rejected(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="fullbad", ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")
    r = s3.upload_part(Bucket=bucket, Key="fullbad", UploadId=up["UploadId"], PartNumber=1, Body=b"abc", ChecksumAlgorithm="CRC32")
    parts = {"Parts": [{"PartNumber": 1, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]}]}
    expect_error(400, "BadDigest", s3.complete_multipart_upload, Bucket=bucket, Key="fullbad", UploadId=up["UploadId"],
                 MultipartUpload=parts, ChecksumCRC32="AAAAAA==", ChecksumType="FULL_OBJECT")
    expect_error(404, "NoSuchKey", s3.get_object, Bucket=bucket, Key="fullbad")
    s3.abort_multipart_upload(Bucket=bucket, Key="fullbad", UploadId=up["UploadId"])


# -- copy, metadata, presign, conditionals ----------------------------------------------------------
def test_copy_object(s3, bucket):
    data = payload(70_000, 9)
    put(s3, bucket, "src", data, ContentType="text/x-src", Metadata={"a": "1"})
    r = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"].strip('"') == hashlib.md5(data).hexdigest()
    got = s3.get_object(Bucket=bucket, Key="dst")
    assert sha256(got["Body"].read()) == sha256(data)
    assert got["Metadata"] == {"a": "1"}
    assert got["ContentType"] == "text/x-src"
    s3.copy_object(Bucket=bucket, Key="dst2", CopySource=f"{bucket}/src", MetadataDirective="REPLACE",
                   Metadata={"b": "2"}, ContentType="text/plain")
    head = s3.head_object(Bucket=bucket, Key="dst2")
    assert head["Metadata"] == {"b": "2"} and head["ContentType"] == "text/plain"
    assert get_bytes(s3, bucket, "dst2") == data


def test_metadata_and_content_type(s3, bucket):
    put(s3, bucket, "meta", b"{}", ContentType="application/json",
        Metadata={"color": "blue", "multi-word": "x y z"})
    head = s3.head_object(Bucket=bucket, Key="meta")
    assert head["ContentType"] == "application/json"
    assert head["Metadata"] == {"color": "blue", "multi-word": "x y z"}
    got = s3.get_object(Bucket=bucket, Key="meta")
    assert got["ContentType"] == "application/json" and got["Metadata"]["color"] == "blue"
    assert got["Body"].read() == b"{}"


def test_presigned_get(s3, bucket, mem_server):
    data = payload(12345, 4)
    put(s3, bucket, "pre/signed key", data)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre/signed key"}, ExpiresIn=300)
    assert url.startswith(mem_server.url) and "X-Amz-Signature=" in url
    r = requests.get(url, timeout=30)
    assert r.status_code == 200, r.text
    assert sha256(r.content) == sha256(data)
    # a tampered signature is refused
    bad = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    r = requests.get(bad, timeout=30)
    assert r.status_code == 403 and "<Code>" in r.text


def test_conditional_get(s3, bucket):
    data = b"conditional"
    etag = put(s3, bucket, "c", data)["ETag"]
    assert get_bytes(s3, bucket, "c", IfMatch=etag) == data
    expect_error(412, "PreconditionFailed", s3.get_object, Bucket=bucket, Key="c", IfMatch='"0000"')
    expect_error(304, None, s3.get_object, Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert get_bytes(s3, bucket, "c", IfNoneMatch='"0000"') == data
    mtime = s3.head_object(Bucket=bucket, Key="c")["LastModified"]
    future = mtime + dt.timedelta(hours=1)
    past = mtime - dt.timedelta(hours=1)
    expect_error(304, None, s3.get_object, Bucket=bucket, Key="c", IfModifiedSince=future)
    assert get_bytes(s3, bucket, "c", IfModifiedSince=past) == data
    expect_error(412, "PreconditionFailed", s3.get_object, Bucket=bucket, Key="c", IfUnmodifiedSince=past)
    assert get_bytes(s3, bucket, "c", IfUnmodifiedSince=future) == data


# -- integrity --------------------------------------------------------------------------------------
def _checksum(algorithm: str, data: bytes) -> str:
    if algorithm == "CRC32":
        return b64(zlib.crc32(data).to_bytes(4, "big"))
    if algorithm == "CRC32C":
        return b64(crc32c(data).to_bytes(4, "big"))
    return b64(hashlib.sha256(data).digest())


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "SHA256"])
def test_checksum_roundtrip(s3, bucket, algorithm):
    data = payload(100_000, 21)
    want = _checksum(algorithm, data)
    if algorithm == "CRC32C":
        # botocore computes CRC32C only with awscrt; hand it the value instead.
        r = put(s3, bucket, "ck", data, ChecksumCRC32C=want)
    else:
        r = put(s3, bucket, "ck", data, ChecksumAlgorithm=algorithm)
    assert r.get(f"Checksum{algorithm}") == want
    got = s3.get_object(Bucket=bucket, Key="ck", ChecksumMode="ENABLED")
    assert got.get(f"Checksum{algorithm}") == want
    assert sha256(got["Body"].read()) == sha256(data)
    head = s3.head_object(Bucket=bucket, Key="ck", ChecksumMode="ENABLED")
    assert head.get(f"Checksum{algorithm}") == want


def test_wrong_checksum_rejected(s3, bucket):
    data = payload(1000, 1)
    wrong = b64(zlib.crc32(data + b"!").to_bytes(4, "big"))
    err = expect_error(400, None, put, s3, bucket, "badck", data, ChecksumCRC32=wrong)
    assert client_error_code(err)[1] in ("BadDigest", "InvalidRequest", "XAmzContentChecksumMismatch")
    expect_error(404, "NoSuchKey", s3.get_object, Bucket=bucket, Key="badck")


def test_content_md5(s3, bucket):
    data = b"md5 checked"
    put(s3, bucket, "md5ok", data, ContentMD5=b64(hashlib.md5(data).digest()))
    assert get_bytes(s3, bucket, "md5ok") == data
    expect_error(400, "BadDigest", put, s3, bucket, "md5bad", data, ContentMD5=b64(hashlib.md5(b"other").digest()))
    expect_error(404, "NoSuchKey", s3.get_object, Bucket=bucket, Key="md5bad")


# -- auth --------------------------------------------------------------------------------------------
def test_wrong_secret_key(mem_server, bucket):
    bad = s3_client(mem_server, secret_key="not-the-secret")
    expect_error(403, "SignatureDoesNotMatch", bad.list_objects_v2, Bucket=bucket)
    expect_error(403, "SignatureDoesNotMatch", bad.put_object, Bucket=bucket, Key="x", Body=b"x")


def test_unknown_access_key(mem_server, bucket):
    bad = s3_client(mem_server, access_key="AKIDUNKNOWN")
    expect_error(403, "InvalidAccessKeyId", bad.list_objects_v2, Bucket=bucket)


def test_unsigned_request_denied(mem_server, bucket):
    r = requests.get(f"{mem_server.url}/{bucket}/x", timeout=30)
    assert r.status_code == 403 and "<Code>AccessDenied</Code>" in r.text, r.text


# -- TLS ------------------------------------------------------------------------------------------------
def test_boto3_over_tls(ferry, tmp_path):
    srv = ferry("--memory", "--tls")
    assert srv.scheme == "https" and srv.ca_file, srv.lines
    s3 = s3_client(srv)
    s3.create_bucket(Bucket="tls")
    data = payload(300_000, 8)
    # Over https botocore sends aws-chunked bodies with a trailing checksum.
    s3.put_object(Bucket="tls", Key="k", Body=data, ChecksumAlgorithm="SHA256")
    got = s3.get_object(Bucket="tls", Key="k", ChecksumMode="ENABLED")
    assert got["ChecksumSHA256"] == b64(hashlib.sha256(data).digest())
    assert sha256(got["Body"].read()) == sha256(data)
    src = tmp_path / "f"
    big = payload(11 * MiB, 2)
    src.write_bytes(big)
    s3.upload_file(str(src), "tls", "mp", Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
    assert sha256(get_bytes(s3, "tls", "mp")) == sha256(big)
