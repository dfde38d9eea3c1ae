"""The artifact store in S3-compatible object storage (AWS S3, MinIO, Ceph RGW), through boto3.

Selected by `ADVISOR_ARTIFACT_STORE=s3://bucket/prefix` (app.storage.open_store); the endpoint and region come from
`ADVISOR_S3_ENDPOINT_URL` / `ADVISOR_S3_REGION`, the credentials from boto3's usual chain (`AWS_ACCESS_KEY_ID` /
`AWS_SECRET_ACCESS_KEY` in the environment, `~/.aws/credentials`, `AWS_PROFILE`, an instance role), never from a
command line. The same contract as the local directory (app.storage.ArtifactStore):

- **Streaming.** An upload is hashed and counted against its cap as it arrives by the one receiving path both
  stores share (app.storage.IncomingFile); this module is only where its bytes go (`S3Sink`): sent on in parts of
  `PART_BYTES` into a multipart upload under `<prefix>incoming/<random>`; at most one part is in memory and nothing
  touches the API host's disk. A file smaller than one part stays in memory until it is checked and is then written
  in one request.
- **Visible only once complete and checked.** The archive checks (`advisor.core.artifacts.sniff`, which needs to seek
  in the zip) read the completed incoming object through ranged GETs; only then is the object copied (server side)
  to `<prefix>artifacts/<sha[:2]>/<sha>`, the name every reader uses. A copy (and a single PUT) is atomic: an object
  under its hash is always complete. Writing the same content again replaces it harmlessly (dedupe).
- **Nothing left behind.** A refused upload's incoming object is deleted; an interrupted one's multipart upload is
  aborted. Multipart uploads and incoming objects a killed server left behind are removed by `discard_incomplete`
  once older than `incomplete_min_age_s` (another replica may still be receiving a newer one).
- **Workers fetch directly** (`download_url`): a presigned GET of one object, valid for a bounded time.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urlparse

from app.storage import _SHA256, ReceivingStore

log = logging.getLogger("npu_advisor.server")
PART_BYTES = 8 << 20  # S3's minimum part is 5 MiB (except the last)
READ_BUFFER_BYTES = 1 << 20  # the archive checks' ranged reads
COPY_CHUNK_BYTES = 1 << 20
MAX_URL_TTL_S = 7 * 24 * 3600  # SigV4's own limit


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # "" or ending in "/"

    @classmethod
    def parse(cls, url: str) -> S3Location:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"ADVISOR_ARTIFACT_STORE={url!r}: expected s3://bucket or s3://bucket/prefix")
        prefix = parsed.path.strip("/")
        return cls(bucket=parsed.netloc, prefix=f"{prefix}/" if prefix else "")


def s3_client(*, endpoint_url: str | None, region: str | None, addressing_style: str = "auto") -> Any:
    """A boto3 S3 client; credentials from boto3's default chain (environment, shared files, instance role)."""
    import boto3
    from botocore.config import Config

    config = Config(
        s3={"addressing_style": addressing_style},
        signature_version="s3v4",
        retries={"max_attempts": 5, "mode": "standard"},
        max_pool_connections=64,
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


class S3ArtifactStore(ReceivingStore):
    """Content-addressed objects `<prefix>artifacts/<sha[:2]>/<sha>` in one bucket (see the module docstring)."""

    kind = "s3"

    def __init__(self, location: S3Location, client: Any, *, incomplete_min_age_s: float = 3600) -> None:
        self.location = location
        self.client = client
        self.bucket = location.bucket
        self.incomplete_min_age_s = incomplete_min_age_s

    # ------------------------------------------------------------ names
    def key_for(self, sha256: str) -> str:
        if not _SHA256.match(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return f"{self.location.prefix}artifacts/{sha256[:2]}/{sha256}"

    @property
    def incoming_prefix(self) -> str:
        return f"{self.location.prefix}incoming/"

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.location.prefix}"

    # ------------------------------------------------------------ reading
    def exists(self, sha256: str) -> bool:
        if _SHA256.match(sha256) is None:
            return False
        return self._last_modified(self.key_for(sha256)) is not None

    def download_url(self, sha256: str, expires_s: float) -> str:
        """A presigned GET of this one object, valid for `expires_s` seconds (at most SigV4's 7 days)."""
        ttl = max(1, min(int(expires_s), MAX_URL_TTL_S))
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self.key_for(sha256)}, ExpiresIn=ttl
        )

    def iter_bytes(self, sha256: str) -> Iterator[bytes]:
        """The object's bytes in chunks (the download route for users; workers fetch through download_url)."""
        body = self.client.get_object(Bucket=self.bucket, Key=self.key_for(sha256))["Body"]
        try:
            yield from body.iter_chunks(COPY_CHUNK_BYTES)
        finally:
            body.close()

    def check_ready(self) -> None:
        """Raises when the bucket cannot be reached with these credentials (/readyz)."""
        self.client.head_bucket(Bucket=self.bucket)

    # ------------------------------------------------------------ writing
    def open_sink(self) -> S3Sink:
        return S3Sink(self)

    # ------------------------------------------------------------ sweeping
    def stored_before(self, cutoff: float) -> Iterator[str]:
        """The sha256 of every object last written before `cutoff` (a time.time() value)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.location.prefix}artifacts/"
        )
        for page in pages:
            for item in page.get("Contents", []):
                name = item["Key"].rsplit("/", 1)[-1]
                if _SHA256.match(name) and item["LastModified"].timestamp() < cutoff:
                    yield name

    def remove_if_before(self, sha256: str, cutoff: float) -> bool:
        key = self.key_for(sha256)
        modified = self._last_modified(key)
        if modified is None or modified >= cutoff:
            return False
        self.client.delete_object(Bucket=self.bucket, Key=key)
        return True

    def discard_incomplete(self, *, min_age_s: float | None = None) -> int:
        """Abort the multipart uploads and delete the incoming objects a killed server left behind, once older than
        `min_age_s` (default: the store's `incomplete_min_age_s`); a younger one may be another replica's upload."""
        cutoff = time.time() - (self.incomplete_min_age_s if min_age_s is None else min_age_s)
        removed = 0
        for page in self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=self.incoming_prefix
        ):
            for upload in page.get("Uploads", []):
                if _started(upload["Key"], upload["Initiated"].timestamp()) <= cutoff:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    removed += 1
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.incoming_prefix
        ):
            for item in page.get("Contents", []):
                if _started(item["Key"], item["LastModified"].timestamp()) <= cutoff:
                    self.client.delete_object(Bucket=self.bucket, Key=item["Key"])
                    removed += 1
        return removed

    def _last_modified(self, key: str) -> float | None:
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return head["LastModified"].timestamp()


class S3Sink:
    """Object storage's bytes of one upload: full parts sent on into a multipart upload under an incoming key, then
    copied under the hash; a file smaller than one part is kept in memory and written in one request."""

    def __init__(self, store: S3ArtifactStore) -> None:
        self.store = store
        # the start time in the name: the sweep's age of it, whatever clock (or fake date) the store keeps
        self.key = f"{store.incoming_prefix}{int(time.time())}-{uuid.uuid4().hex}"
        self._buffer = bytearray()
        self._upload_id: str | None = None  # an open multipart upload under self.key
        self._parts: list[dict] = []
        self._incoming_object = False  # the completed multipart upload exists under self.key
        self._size = 0

    def append(self, chunk: bytes) -> None:
        """Keep `chunk`; send each full part."""
        self._size += len(chunk)
        self._buffer += chunk
        while len(self._buffer) >= PART_BYTES:
            self._send_part(bytes(self._buffer[:PART_BYTES]))
            del self._buffer[:PART_BYTES]

    @contextmanager
    def complete(self) -> Iterator[BinaryIO]:
        """The whole upload, readable and seekable: from memory (smaller than one part), else the completed
        incoming object through ranged GETs."""
        if self._upload_id is None:
            yield io.BytesIO(bytes(self._buffer))
            return
        if self._buffer:
            self._send_part(bytes(self._buffer))
            self._buffer.clear()
        store = self.store
        store.client.complete_multipart_upload(
            Bucket=store.bucket, Key=self.key, UploadId=self._upload_id, MultipartUpload={"Parts": self._parts}
        )
        self._upload_id, self._incoming_object = None, True
        with io.BufferedReader(
            _RangeReader(store.client, store.bucket, self.key, self._size), READ_BUFFER_BYTES
        ) as reader:
            yield reader

    def place(self, sha256: str) -> None:
        """Write the object under its hash: one PUT of the in-memory file, or a server-side copy of the incoming
        object (both atomic)."""
        store, client = self.store, self.store.client
        final = store.key_for(sha256)
        if not self._incoming_object:
            client.put_object(Bucket=store.bucket, Key=final, Body=bytes(self._buffer))
            self._buffer = bytearray()
        else:
            client.copy({"Bucket": store.bucket, "Key": self.key}, store.bucket, final)  # server side, multipart
            self._delete_incoming()

    def discard(self) -> None:
        """Abort the multipart upload / delete the incoming object unless placed (safe to call always). A store
        that cannot be reached now leaves it to `discard_incomplete` (logged, never raised over the real error)."""
        self._buffer = bytearray()
        client = self.store.client
        try:
            if self._upload_id is not None:
                upload_id, self._upload_id = self._upload_id, None
                client.abort_multipart_upload(Bucket=self.store.bucket, Key=self.key, UploadId=upload_id)
            if self._incoming_object:
                self._delete_incoming()
        except Exception:  # noqa: BLE001
            log.exception("could not remove the incomplete upload %s; the next sweep removes it", self.key)

    def _send_part(self, data: bytes) -> None:
        client = self.store.client
        if self._upload_id is None:
            self._upload_id = client.create_multipart_upload(Bucket=self.store.bucket, Key=self.key)["UploadId"]
        number = len(self._parts) + 1
        answer = client.upload_part(
            Bucket=self.store.bucket, Key=self.key, UploadId=self._upload_id, PartNumber=number, Body=data
        )
        self._parts.append({"PartNumber": number, "ETag": answer["ETag"]})

    def _delete_incoming(self) -> None:
        self.store.client.delete_object(Bucket=self.store.bucket, Key=self.key)
        self._incoming_object = False


def _started(key: str, otherwise: float) -> float:
    """When the upload under an incoming key started: the time in its name (S3Sink), else `otherwise`."""
    stamp = key.rsplit("/", 1)[-1].split("-", 1)[0]
    return float(stamp) if stamp.isdigit() else otherwise


class _RangeReader(io.RawIOBase):
    """A seekable read-only file over one object, each read a ranged GET (wrapped in a BufferedReader)."""

    def __init__(self, client: Any, bucket: str, key: str, size: int) -> None:
        self.client, self.bucket, self.key, self.size = client, bucket, key, size
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self.size - self.position)
        if want <= 0:
            return 0
        end = self.position + want - 1
        answer = self.client.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={self.position}-{end}")
        data = answer["Body"].read()
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)
