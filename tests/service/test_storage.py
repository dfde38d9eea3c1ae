"""The content-addressed artifact store: hashed while streamed, capped, atomic, nothing half-written left."""

from __future__ import annotations

import hashlib
import io

import pytest

from app.storage import CHUNK_BYTES, ArtifactStore, UploadTooLarge


class CountingReader(io.BytesIO):
    """Records the largest read, to show the store never asks for the whole file at once."""

    largest_read = 0

    def read(self, size: int = -1) -> bytes:
        self.largest_read = max(self.largest_read, size if size >= 0 else len(self.getvalue()))
        return super().read(size)


def files_under(store: ArtifactStore) -> list:
    return sorted(p for p in store.root.rglob("*") if p.is_file())


def test_save_streams_hashes_and_places_the_file_under_its_sha(tmp_path):
    store = ArtifactStore(tmp_path / "artifacts")
    data = b"abc" * (CHUNK_BYTES // 2)  # 1.5 chunks
    source = CountingReader(data)
    stored, _ = store.save(source, max_bytes=10 * len(data))
    sha = hashlib.sha256(data).hexdigest()
    assert stored.sha256 == sha and stored.size_bytes == len(data)
    assert stored.path == tmp_path / "artifacts" / sha[:2] / sha
    assert stored.path.read_bytes() == data
    assert source.largest_read == CHUNK_BYTES
    assert files_under(store) == [stored.path]


def test_same_content_twice_is_one_file(tmp_path):
    store = ArtifactStore(tmp_path)
    first, _ = store.save(io.BytesIO(b"same"), max_bytes=100)
    second, _ = store.save(io.BytesIO(b"same"), max_bytes=100)
    assert first.path == second.path and files_under(store) == [first.path]


def test_over_the_cap_raises_with_the_limit_and_leaves_nothing(tmp_path):
    store = ArtifactStore(tmp_path)
    with pytest.raises(UploadTooLarge, match="limit of 1 KiB"):
        store.save(io.BytesIO(b"x" * 1025), max_bytes=1024, what="the model file")
    assert files_under(store) == []


def test_a_refusing_check_leaves_nothing(tmp_path):
    store = ArtifactStore(tmp_path)

    def refuse(path) -> None:  # noqa: ANN001
        assert path.read_bytes() == b"payload", "the check sees the complete file"
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        store.save(io.BytesIO(b"payload"), max_bytes=100, check=refuse)
    assert files_under(store) == []


def test_interrupted_read_leaves_nothing(tmp_path):
    class Broken(io.BytesIO):
        def read(self, size: int = -1) -> bytes:
            if self.tell() > 0:
                raise ConnectionResetError("client went away")
            return super().read(4)

    store = ArtifactStore(tmp_path)
    with pytest.raises(ConnectionResetError):
        store.save(Broken(b"12345678"), max_bytes=100)
    assert files_under(store) == []


def test_leftovers_of_a_crashed_server_are_discarded(tmp_path):
    store = ArtifactStore(tmp_path)
    (store.incoming / "upload-abc").write_bytes(b"half")
    assert store.discard_incomplete() == 1
    assert files_under(store) == []


def test_only_sha256_names_are_paths(tmp_path):
    store = ArtifactStore(tmp_path)
    with pytest.raises(ValueError):
        store.path_for("../../etc/passwd")
    assert store.exists("../../etc/passwd") is False
