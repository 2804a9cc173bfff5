"""rclone (Debian) against `ferry serve`, configured only through environment variables."""

from __future__ import annotations

import pytest

from helpers import REGION, clean_env, make_tree, require_tool, run, tree_hashes

TREE = {"r1.txt": 1, "r2.bin": 123_456, "sub/r3.txt": 999, "sub/deeper/r4 with space.txt": 77, "empty": 0}


@pytest.fixture
def rclone(mem_server, tmp_path):
    exe = require_tool("rclone")
    # clean_env drops AWS_CA_BUNDLE too: rclone 1.60 fails when it is set.
    env = clean_env(RCLONE_CONFIG=str(tmp_path / "rclone.conf"),
                    RCLONE_CONFIG_FERRY_TYPE="s3", RCLONE_CONFIG_FERRY_PROVIDER="Other",
                    RCLONE_CONFIG_FERRY_ENDPOINT=mem_server.url,
                    RCLONE_CONFIG_FERRY_ACCESS_KEY_ID=mem_server.access_key,
                    RCLONE_CONFIG_FERRY_SECRET_ACCESS_KEY=mem_server.secret_key,
                    RCLONE_CONFIG_FERRY_REGION=REGION,
                    RCLONE_CONFIG_FERRY_FORCE_PATH_STYLE="true")

    def rclone_(*args, check=True):
        return run([exe, "--retries", "1", "--low-level-retries", "1", *args], env=env, check=check)

    return rclone_


def test_rclone_copy_up_down_lsf_check(rclone, bucket, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    want = make_tree(src, TREE, seed=8)
    rclone("copy", src, f"ferry:{bucket}/rc")
    out = rclone("lsf", "-R", "--files-only", f"ferry:{bucket}/rc").stdout
    assert sorted(out.split("\n")[:-1]) == sorted(TREE), out
    # rclone check compares sizes and MD5s (the ETags of single-part objects)
    rclone("check", src, f"ferry:{bucket}/rc")
    rclone("copy", f"ferry:{bucket}/rc", dst)
    assert tree_hashes(dst) == want
    rclone("delete", f"ferry:{bucket}/rc")
    assert rclone("lsf", "-R", f"ferry:{bucket}/rc", check=False).stdout.strip() == ""
