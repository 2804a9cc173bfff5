"""The AWS CLI (v1, from the venv) against `ferry serve`: s3 and s3api commands."""

from __future__ import annotations

import json

import pytest

from helpers import REGION, clean_env, make_tree, payload, require_tool, run, s3_client, sha256, tree_hashes

TREE = {"a.txt": 10, "empty": 0, "dir/b.bin": 70_000, "dir/sub/c.bin": 1_000_000,
        "dir/sub/d e f.txt": 123, "ünï/ç.txt": 55}


@pytest.fixture
def aws(mem_server, tmp_path):
    exe = require_tool("aws")
    env = clean_env(AWS_ACCESS_KEY_ID=mem_server.access_key, AWS_SECRET_ACCESS_KEY=mem_server.secret_key,
                    AWS_DEFAULT_REGION=REGION, AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
                    AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"),
                    AWS_EC2_METADATA_DISABLED="true", AWS_MAX_ATTEMPTS="1")

    def aws_(*args, check=True):
        return run([exe, "--endpoint-url", mem_server.url, *args], env=env, check=check)

    return aws_


def test_s3_cp_recursive_up_down_ls_rm(aws, bucket, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    want = make_tree(src, TREE, seed=3)
    aws("s3", "cp", src, f"s3://{bucket}/tree/", "--recursive", "--only-show-errors")
    out = aws("s3", "ls", f"s3://{bucket}/", "--recursive").stdout
    listed = sorted(line.split(None, 3)[3][len("tree/"):] for line in out.splitlines() if line.strip())
    assert listed == sorted(TREE), out
    aws("s3", "cp", f"s3://{bucket}/tree/", dst, "--recursive", "--only-show-errors")
    assert tree_hashes(dst) == want
    aws("s3", "rm", f"s3://{bucket}/tree/", "--recursive", "--only-show-errors")
    out = aws("s3", "ls", f"s3://{bucket}/", "--recursive", check=False).stdout
    assert out.strip() == ""


def test_s3_cp_multipart(aws, bucket, tmp_path, mem_server):
    # awscli's default multipart threshold is 8 MiB: 20 MiB goes up in 3 parts.
    f = tmp_path / "big"
    data = payload(20 * 1024 * 1024, 5)
    f.write_bytes(data)
    aws("s3", "cp", f, f"s3://{bucket}/big", "--only-show-errors")
    head = s3_client(mem_server).head_object(Bucket=bucket, Key="big")
    assert head["ETag"].endswith('-3"'), head["ETag"]
    aws("s3", "cp", f"s3://{bucket}/big", tmp_path / "back", "--only-show-errors")
    assert sha256((tmp_path / "back").read_bytes()) == sha256(data)


def test_s3api_put_get_head(aws, bucket, tmp_path):
    f = tmp_path / "in"
    data = payload(54_321, 9)
    f.write_bytes(data)
    put = json.loads(aws("s3api", "put-object", "--bucket", bucket, "--key", "api/obj", "--body", f,
                         "--content-type", "application/x-ferry", "--metadata", "k1=v1").stdout)
    assert put["ETag"]
    head = json.loads(aws("s3api", "head-object", "--bucket", bucket, "--key", "api/obj").stdout)
    assert head["ContentLength"] == len(data)
    assert head["ContentType"] == "application/x-ferry"
    assert head["Metadata"] == {"k1": "v1"}
    assert head["ETag"] == put["ETag"]
    out = tmp_path / "out"
    get = json.loads(aws("s3api", "get-object", "--bucket", bucket, "--key", "api/obj", out).stdout)
    assert get["ContentLength"] == len(data)
    assert sha256(out.read_bytes()) == sha256(data)
    miss = aws("s3api", "head-object", "--bucket", bucket, "--key", "api/missing", check=False)
    assert miss.returncode != 0 and "404" in miss.stderr
