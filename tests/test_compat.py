"""What stock S3 tools send in passing, answered as S3 and MinIO answer it.

Real clients against a real `ferry serve`: boto3 with its default settings (which presign
with SigV2), boto3 with `signature_version="s3"` (SigV2 headers), the AWS CLI, and raw
signed requests where a client would not send what we need to check (a replayed
request). Each test names the call a tool makes and the answer it expects.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import subprocess
import time
import urllib.parse

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from helpers import ACCESS_KEY, REGION, SECRET_KEY, clean_env, client_error_code, payload, require_tool, s3_client

MiB = 1024 * 1024


def expect_error(status, code, fn, *a, **kw):
    with pytest.raises(ClientError) as ei:
        fn(*a, **kw)
    got = client_error_code(ei.value)
    assert got[0] == status and (code is None or got[1] == code), f"expected {status} {code}, got {got}"
    return ei.value


def default_client(server, **config_kw):
    """boto3 as a user gets it: no signature_version, path-style addressing."""
    return boto3.session.Session().client(
        "s3", endpoint_url=server.url, aws_access_key_id=server.access_key or ACCESS_KEY,
        aws_secret_access_key=server.secret_key or SECRET_KEY, region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, **config_kw))


# -- SigV2 ------------------------------------------------------------------------------
def test_boto3_default_presigned_get_is_sigv2_and_accepted(s3, bucket, mem_server):
    data = payload(54321, 3)
    s3.put_object(Bucket=bucket, Key="dir/pre signed+key", Body=data)
    url = default_client(mem_server).generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "dir/pre signed+key"}, ExpiresIn=300)
    assert "AWSAccessKeyId=" in url and "Signature=" in url and "X-Amz-" not in url, url
    r = requests.get(url, timeout=30)
    assert r.status_code == 200, r.text
    assert r.content == data
    # The signature covers the key, the expiry and the secret.
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    for bad in (url.replace("pre%20signed", "pre%20signet"),
                url.replace(f"Expires={q['Expires'][0]}", f"Expires={int(q['Expires'][0]) + 1}")):
        r = requests.get(bad, timeout=30)
        assert r.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in r.text, (bad, r.text)
    wrong = boto3.session.Session().client(
        "s3", endpoint_url=mem_server.url, aws_access_key_id=mem_server.access_key or ACCESS_KEY,
        aws_secret_access_key="not-the-secret", region_name=REGION, config=Config(s3={"addressing_style": "path"}))
    r = requests.get(wrong.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "dir/pre signed+key"}),
                     timeout=30)
    assert r.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in r.text


def test_sigv2_presigned_put_and_expiry(s3, bucket, mem_server):
    client = default_client(mem_server)
    url = client.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "up"}, ExpiresIn=300)
    assert "AWSAccessKeyId=" in url
    r = requests.put(url, data=b"uploaded through a presigned url", timeout=30)
    assert r.status_code == 200, r.text
    assert s3.get_object(Bucket=bucket, Key="up")["Body"].read() == b"uploaded through a presigned url"
    expired = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "up"}, ExpiresIn=1)
    time.sleep(2.1)
    r = requests.get(expired, timeout=30)
    assert r.status_code == 403 and "Request has expired" in r.text, r.text


def test_sigv4_presigned_url_expires(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=1)
    assert "X-Amz-Signature=" in url
    time.sleep(2.1)
    r = requests.get(url, timeout=30)
    assert r.status_code == 403 and "Request has expired" in r.text, r.text


def test_sigv2_header_signed_client_round_trips(mem_server):
    """boto3 with signature_version='s3' signs every request `Authorization: AWS key:sig`."""
    c = default_client(mem_server, signature_version="s3")
    name = "sigv2-headers"
    c.create_bucket(Bucket=name)
    data = payload(3 * MiB + 17, 9)
    c.put_object(Bucket=name, Key="a/b c", Body=data, Metadata={"color": "blue"}, ContentType="text/plain")
    got = c.get_object(Bucket=name, Key="a/b c")
    assert got["Body"].read() == data and got["Metadata"] == {"color": "blue"}
    assert c.get_object(Bucket=name, Key="a/b c", Range="bytes=5-9")["Body"].read() == data[5:10]
    assert [o["Key"] for o in c.list_objects_v2(Bucket=name)["Contents"]] == ["a/b c"]
    up = c.create_multipart_upload(Bucket=name, Key="mp")["UploadId"]
    part1 = payload(5 * MiB, 10)
    e1 = c.upload_part(Bucket=name, Key="mp", UploadId=up, PartNumber=1, Body=part1)["ETag"]
    e2 = c.upload_part(Bucket=name, Key="mp", UploadId=up, PartNumber=2, Body=b"tail")["ETag"]
    assert [p["PartNumber"] for p in c.list_parts(Bucket=name, Key="mp", UploadId=up)["Parts"]] == [1, 2]
    c.complete_multipart_upload(Bucket=name, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert c.get_object(Bucket=name, Key="mp")["Body"].read() == part1 + b"tail"
    c.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "a/b c"}, {"Key": "mp"}]})
    c.delete_bucket(Bucket=name)
    bad = boto3.session.Session().client(
        "s3", endpoint_url=mem_server.url, aws_access_key_id=mem_server.access_key or ACCESS_KEY,
        aws_secret_access_key="wrong", region_name=REGION,
        config=Config(signature_version="s3", s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))
    expect_error(403, "SignatureDoesNotMatch", bad.list_buckets)


def _sigv2_get(server, path, date):
    string_to_sign = f"GET\n\n\n{date}\n{path}"
    secret = (server.secret_key or SECRET_KEY).encode()
    sig = base64.b64encode(hmac.new(secret, string_to_sign.encode(), hashlib.sha1).digest()).decode()
    return requests.get(server.url + path, timeout=30, headers={
        "Date": date, "Authorization": f"AWS {server.access_key or ACCESS_KEY}:{sig}"})


def test_sigv2_replay_outside_skew_window_refused(s3, bucket, mem_server):
    s3.put_object(Bucket=bucket, Key="k", Body=b"fresh")
    now = email.utils.formatdate(usegmt=True)
    r = _sigv2_get(mem_server, f"/{bucket}/k", now)
    assert r.status_code == 200 and r.content == b"fresh", r.text
    # The same request signed 16 minutes ago (S3's window is 15) is a replay.
    old = email.utils.formatdate(time.time() - 16 * 60, usegmt=True)
    r = _sigv2_get(mem_server, f"/{bucket}/k", old)
    assert r.status_code == 403 and "<Code>RequestTimeTooSkewed</Code>" in r.text, r.text


def test_sigv4_replay_outside_skew_window_refused(s3, bucket, mem_server):
    import datetime as dt
    from unittest import mock

    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    s3.put_object(Bucket=bucket, Key="k", Body=b"fresh")
    url = f"{mem_server.url}/{bucket}/k"
    creds = Credentials(mem_server.access_key or ACCESS_KEY, mem_server.secret_key or SECRET_KEY)

    def signed(at: dt.datetime):
        req = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        with mock.patch.object(botocore.auth.datetime, "datetime", wraps=dt.datetime) as fake:
            fake.utcnow.return_value = at.replace(tzinfo=None)
            fake.now.return_value = at
            botocore.auth.S3SigV4Auth(creds, "s3", REGION).add_auth(req)
        return requests.get(url, headers=dict(req.headers), timeout=30)

    now = dt.datetime.now(dt.timezone.utc)
    r = signed(now)
    assert r.status_code == 200 and r.content == b"fresh", r.text
    r = signed(now - dt.timedelta(minutes=16))
    assert r.status_code == 403 and "<Code>RequestTimeTooSkewed</Code>" in r.text, r.text


# -- versions ---------------------------------------------------------------------------
def test_list_object_versions_on_unversioned_bucket(s3, bucket):
    keys = ["a", "b/1", "b/2", "c", "d/x/y", "e"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    r = s3.list_object_versions(Bucket=bucket)
    assert [v["Key"] for v in r["Versions"]] == keys
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in r["Versions"])
    assert all(v["Owner"]["ID"] for v in r["Versions"])
    assert "DeleteMarkers" not in r and not r["IsTruncated"]
    r = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [v["Key"] for v in r["Versions"]] == ["a", "c", "e"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["b/", "d/"]
    r = s3.list_object_versions(Bucket=bucket, Prefix="b/")
    assert [v["Key"] for v in r["Versions"]] == ["b/1", "b/2"]
    # Pages of two, by key-marker, as the paginator walks them.
    r = s3.list_object_versions(Bucket=bucket, MaxKeys=2)
    assert r["IsTruncated"] and r["NextKeyMarker"] == "b/1" and r["NextVersionIdMarker"] == "null"
    r = s3.list_object_versions(Bucket=bucket, MaxKeys=2, KeyMarker="b/1", VersionIdMarker="null")
    assert [v["Key"] for v in r["Versions"]] == ["b/2", "c"]
    pages = s3.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": 4})
    assert [v["Key"] for p in pages for v in p.get("Versions", [])] == keys
    pages = list(s3.get_paginator("list_object_versions").paginate(
        Bucket=bucket, Delimiter="/", PaginationConfig={"PageSize": 1}))
    seen = [(v["Key"]) for p in pages for v in p.get("Versions", [])]
    prefixes = [c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])]
    assert seen == ["a", "c", "e"] and prefixes == ["b/", "d/"]


def test_delete_objects_with_version_null(s3, bucket):
    for k in ("x", "y"):
        s3.put_object(Bucket=bucket, Key=k, Body=b"1")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "x", "VersionId": "null"}, {"Key": "y"}, {"Key": "y", "VersionId": "3HL4kqtJlcpXroDTDmjVBH40Nrjfkd"}]})
    assert sorted((d["Key"], d.get("VersionId")) for d in r["Deleted"]) == [("x", "null"), ("y", None)]
    assert [(e["Key"], e["Code"]) for e in r["Errors"]] == [("y", "NoSuchVersion")]
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    # GET of version "null" is the object; any other version does not exist.
    s3.put_object(Bucket=bucket, Key="z", Body=b"zz")
    assert s3.get_object(Bucket=bucket, Key="z", VersionId="null")["Body"].read() == b"zz"
    expect_error(404, "NoSuchVersion", s3.get_object, Bucket=bucket, Key="z", VersionId="abc")


def test_delete_bucket_drops_unfinished_uploads(s3):
    name = "with-upload"
    s3.create_bucket(Bucket=name)
    up = s3.create_multipart_upload(Bucket=name, Key="big")["UploadId"]
    s3.upload_part(Bucket=name, Key="big", UploadId=up, PartNumber=1, Body=b"x" * 1000)
    s3.delete_bucket(Bucket=name)
    expect_error(404, None, s3.head_bucket, Bucket=name)
    s3.create_bucket(Bucket=name)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=name)
    expect_error(404, "NoSuchUpload", s3.list_parts, Bucket=name, Key="big", UploadId=up)
    # Objects still keep a bucket.
    s3.put_object(Bucket=name, Key="k", Body=b"1")
    expect_error(409, "BucketNotEmpty", s3.delete_bucket, Bucket=name)
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)


# -- calls made in passing --------------------------------------------------------------
def test_acls_are_private_and_only_private_is_accepted(s3, bucket):
    for acl in (s3.get_bucket_acl(Bucket=bucket), None):
        if acl is None:
            s3.put_object(Bucket=bucket, Key="o", Body=b"1")
            acl = s3.get_object_acl(Bucket=bucket, Key="o")
        owner = acl["Owner"]["ID"]
        assert [(g["Grantee"]["ID"], g["Grantee"]["Type"], g["Permission"]) for g in acl["Grants"]] == [
            (owner, "CanonicalUser", "FULL_CONTROL")]
    assert owner == s3.list_buckets()["Owner"]["ID"]
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    s3.put_object_acl(Bucket=bucket, Key="o", ACL="private")
    s3.put_bucket_acl(Bucket=bucket, AccessControlPolicy={
        "Owner": {"ID": owner},
        "Grants": [{"Grantee": {"ID": owner, "Type": "CanonicalUser"}, "Permission": "FULL_CONTROL"}]})
    for fn, kw in ((s3.put_bucket_acl, {}), (s3.put_object_acl, {"Key": "o"})):
        e = expect_error(400, "AccessControlListNotSupported", fn, Bucket=bucket, ACL="public-read", **kw)
        assert "private" in e.response["Error"]["Message"]
    expect_error(400, "AccessControlListNotSupported", s3.put_bucket_acl, Bucket=bucket,
                 GrantRead='uri="http://acs.amazonaws.com/groups/global/AllUsers"')
    expect_error(404, "NoSuchKey", s3.get_object_acl, Bucket=bucket, Key="missing")
    expect_error(404, "NoSuchBucket", s3.get_bucket_acl, Bucket="no-such-bucket-here")


def test_bucket_versioning_state_kept_and_enabled_refused(s3, bucket):
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    e = expect_error(501, "NotImplemented", s3.put_bucket_versioning, Bucket=bucket,
                     VersioningConfiguration={"Status": "Enabled"})
    assert "versioning" in e.response["Error"]["Message"].lower()
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"


def test_get_bucket_location(s3, bucket):
    assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] is None
    expect_error(404, "NoSuchBucket", s3.get_bucket_location, Bucket="no-such-bucket-here")


def test_get_and_head_by_part_number(s3, bucket):
    part1, part2 = payload(5 * MiB, 1), payload(1234, 2)
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    etags = [s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n, Body=b)["ETag"]
             for n, b in ((1, part1), (2, part2))]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]})
    total = len(part1) + len(part2)
    r = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert r["Body"].read() == part2 and r["PartsCount"] == 2
    assert r["ContentRange"] == f"bytes {len(part1)}-{total - 1}/{total}"
    r = s3.head_object(Bucket=bucket, Key="mp", PartNumber=1)
    assert r["ContentLength"] == len(part1) and r["PartsCount"] == 2
    expect_error(416, None, s3.get_object, Bucket=bucket, Key="mp", PartNumber=3)
    expect_error(400, "InvalidRequest", s3.get_object, Bucket=bucket, Key="mp", PartNumber=1, Range="bytes=0-1")
    s3.put_object(Bucket=bucket, Key="single", Body=b"one piece")
    assert s3.get_object(Bucket=bucket, Key="single", PartNumber=1)["Body"].read() == b"one piece"
    expect_error(416, None, s3.get_object, Bucket=bucket, Key="single", PartNumber=2)


def test_list_owner_with_fetch_owner(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    owner = s3.list_buckets()["Owner"]
    assert "Owner" not in s3.list_objects_v2(Bucket=bucket)["Contents"][0]
    got = s3.list_objects_v2(Bucket=bucket, FetchOwner=True)["Contents"][0]["Owner"]
    assert got["ID"] == owner["ID"] and got["DisplayName"] == owner["DisplayName"]
    assert s3.list_objects(Bucket=bucket)["Contents"][0]["Owner"]["ID"] == owner["ID"]


CONTROL_KEYS = ["ctl/\x01start", "ctl/tab\tnew\nline\r", "ctl/\x1f\x7fend", "ctl/bell\x07 & <x>"]


def test_keys_with_control_characters_listed_url_encoded(s3, bucket, mem_server, tmp_path):
    for k in CONTROL_KEYS:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    # boto3 asks for encoding-type=url and decodes what it gets.
    got = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="ctl/")["Contents"]]
    assert got == sorted(CONTROL_KEYS)
    got = [o["Key"] for o in s3.list_objects(Bucket=bucket, Prefix="ctl/")["Contents"]]
    assert got == sorted(CONTROL_KEYS)
    got = [v["Key"] for v in s3.list_object_versions(Bucket=bucket, Prefix="ctl/")["Versions"]]
    assert got == sorted(CONTROL_KEYS)
    for k in CONTROL_KEYS:
        assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == k.encode()
    # The AWS CLI lists and deletes them.
    aws = require_tool("aws")
    env = clean_env(AWS_ACCESS_KEY_ID=mem_server.access_key or ACCESS_KEY,
                    AWS_SECRET_ACCESS_KEY=mem_server.secret_key or SECRET_KEY, AWS_DEFAULT_REGION=REGION,
                    AWS_CONFIG_FILE=str(tmp_path / "cfg"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "cred"))
    out = subprocess.run([aws, "--endpoint-url", mem_server.url, "s3", "ls", "--recursive", f"s3://{bucket}/ctl/"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("ctl/") == len(CONTROL_KEYS), out.stdout
    out = subprocess.run([aws, "--endpoint-url", mem_server.url, "s3", "rm", "--recursive", f"s3://{bucket}/ctl/"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert s3.list_objects_v2(Bucket=bucket, Prefix="ctl/")["KeyCount"] == 0


def test_create_existing_bucket_is_already_owned_by_you(s3, bucket):
    expect_error(409, "BucketAlreadyOwnedByYou", s3.create_bucket, Bucket=bucket)


@pytest.mark.parametrize("call,kw,name", [
    ("get_bucket_cors", {}, "GetBucketCors"),
    ("get_bucket_lifecycle_configuration", {}, "GetBucketLifecycleConfiguration"),
    ("get_bucket_policy", {}, "GetBucketPolicy"),
    ("get_bucket_tagging", {}, "GetBucketTagging"),
    ("delete_bucket_encryption", {}, "DeleteBucketEncryption"),
    ("get_object_tagging", {"Key": "k"}, "GetObjectTagging"),
    ("put_object_tagging", {"Key": "k", "Tagging": {"TagSet": []}}, "PutObjectTagging"),
    ("get_object_retention", {"Key": "k"}, "GetObjectRetention"),
    ("get_object_attributes", {"Key": "k", "ObjectAttributes": ["ETag"]}, "GetObjectAttributes"),
])
def test_unimplemented_operations_answer_501_naming_themselves(s3, bucket, call, kw, name):
    e = expect_error(501, "NotImplemented", getattr(s3, call), Bucket=bucket, **kw)
    assert name in e.response["Error"]["Message"], e.response["Error"]["Message"]


# -- the server's own edges -------------------------------------------------------------
def test_metrics_endpoint_is_not_a_bucket(s3, bucket, mem_server):
    r = requests.get(mem_server.url + "/_ferry/metrics", timeout=30)
    assert r.status_code == 200 and "ferry_" in r.text
    # No bucket can be named like it...
    expect_error(400, "InvalidBucketName", s3.create_bucket, Bucket="_ferry")
    # ...and on a virtual-hosted request the path is a key in that bucket, not metrics.
    s3.put_object(Bucket=bucket, Key="_ferry/metrics", Body=b"an object, not metrics")
    port = urllib.parse.urlsplit(mem_server.url).port
    host = f"{bucket}.localhost:{port}"
    r = requests.get(f"http://127.0.0.1:{port}/_ferry/metrics", headers={"Host": host}, timeout=30)
    assert r.status_code == 403 and "ferry_" not in r.text, r.text
    r = requests.get(f"http://127.0.0.1:{port}/_ferry/metrics", headers=_signed_get_headers(mem_server, host),
                     timeout=30)
    assert r.status_code == 200 and r.content == b"an object, not metrics", r.text


def _signed_get_headers(server, host):
    """SigV4 headers (botocore's signer) for a virtual-hosted GET of `/_ferry/metrics`."""
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method="GET", url=f"http://{host}/_ferry/metrics",
                     headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    creds = Credentials(server.access_key or ACCESS_KEY, server.secret_key or SECRET_KEY)
    botocore.auth.S3SigV4Auth(creds, "s3", REGION).add_auth(req)
    headers = dict(req.headers)
    headers["Host"] = host
    return headers


def test_anonymous_only_when_asked(ferry):
    signed = ferry("--memory")
    r = requests.get(signed.url + "/", timeout=30)
    assert r.status_code == 403 and "<Code>AccessDenied</Code>" in r.text
    # No credentials given at all: the dev defaults are required, not nothing.
    defaults = ferry("--memory", creds=False)
    r = requests.put(defaults.url + "/open-door", timeout=30)
    assert r.status_code == 403, r.text
    c = s3_client(defaults, access_key="ferry", secret_key="ferry-secret")
    c.create_bucket(Bucket="open-door")
    anon = ferry("--memory", "--anonymous")
    assert requests.put(anon.url + "/open-door", timeout=30).status_code == 200
    assert requests.put(anon.url + "/open-door/k", data=b"v", timeout=30).status_code == 200
    assert requests.get(anon.url + "/open-door/k", timeout=30).content == b"v"
