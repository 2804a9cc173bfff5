"""fsspec's own abstract test suite (copy, get, put, pipe, open) run against
FerryFileSystem on `ferry serve`."""

from __future__ import annotations

import itertools

import pytest

fsspec = pytest.importorskip("fsspec")
abstract = pytest.importorskip("fsspec.tests.abstract")

_roots = itertools.count(1)


@pytest.fixture(scope="module")
def abstract_fs(server, client):
    client.create_bucket("fsspec-abstract")
    return fsspec.filesystem("ferry", endpoint_url=server.url, credentials=server.credentials,
                             skip_instance_cache=True)


class FerryFixtures(abstract.AbstractFixtures):
    @pytest.fixture
    def fs(self, abstract_fs):
        return abstract_fs

    @pytest.fixture
    def fs_join(self):
        return lambda *parts: "/".join(parts)

    @pytest.fixture
    def fs_path(self, fs):
        return f"fsspec-abstract/root-{next(_roots)}"

    @pytest.fixture
    def supports_empty_directories(self):
        # Object stores have prefixes, not directories: an empty one does not exist.
        return False


class TestFerryCopy(abstract.AbstractCopyTests, FerryFixtures):
    pass


class TestFerryGet(abstract.AbstractGetTests, FerryFixtures):
    pass


class TestFerryPut(abstract.AbstractPutTests, FerryFixtures):
    pass


class TestFerryPipe(abstract.AbstractPipeTests, FerryFixtures):
    pass


class TestFerryOpen(abstract.AbstractOpenTests, FerryFixtures):
    pass
