"""A real S3 API server for the tests: moto's server mode on 127.0.0.1.

:class:`S3Server` starts ``moto_server`` (from the ``moto[server]`` test
dependency) as a subprocess on a free port, creates a bucket, and gives the
environment that points the storage libraries at it (``AWS_ENDPOINT_URL``
and test credentials). The server keeps objects in memory and is stopped at
the end; nothing leaves this machine.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

#: Test credentials: fake, and looked for in stores and logs to show that none is written there.
ACCESS_KEY = "MECHSWEEPTESTKEY0001"
SECRET_KEY = "mechsweep-test-secret-never-written-anywhere"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """``moto_server`` on 127.0.0.1 with one bucket.

    Attributes:
        endpoint: ``http://127.0.0.1:PORT``.
        bucket: the bucket's name.
        env: the environment variables that point boto/s3fs at the server.
    """

    def __init__(self, bucket: str = "sweeps"):
        self.bucket = bucket
        port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        exe = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto_server did not start on {self.endpoint}")
                time.sleep(0.1)
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                    "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}
        self.fs().mkdir(bucket)

    def fs(self):
        """An ``s3fs.S3FileSystem`` on the server (caches off, so every call asks the server)."""
        import s3fs

        return s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, skip_instance_cache=True,
                                 use_listings_cache=False,
                                 client_kwargs={"endpoint_url": self.endpoint})

    def url(self, name: str) -> str:
        """``s3://BUCKET/name``."""
        return f"s3://{self.bucket}/{name}"

    def activate(self) -> dict:
        """Point this process (and the processes it starts) at the server; the old values."""
        old = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        return old

    @staticmethod
    def restore(old: dict) -> None:
        """Undo :meth:`activate`."""
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def stop(self) -> None:
        """Stop the server."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
