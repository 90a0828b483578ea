"""Where the reference contracts are: the agent-sandbox CRDs and the /v1 OpenAPI document.

They live beside the project's checkout, in ../shared/reference. A clone made elsewhere (CI
clones the repository into a fresh directory) finds them beside the repository it was cloned
from, through its origin remote. $SBXD_REFERENCE overrides both.
"""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _origin_dir():
    try:
        url = subprocess.run(["git", "-C", ROOT, "config", "--get", "remote.origin.url"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if url.startswith("file://"):
        url = url[len("file://"):]
    if not url or not os.path.isabs(url):
        return None  # a network remote: nothing beside it on this machine
    return url[:-5] if url.endswith("/.git") else url


def reference_dir():
    """The reference directory found first, or the default place when none is found."""
    env = os.environ.get("SBXD_REFERENCE")
    if env:
        return env
    candidates = [os.path.join(os.path.dirname(ROOT), "shared", "reference")]
    origin = _origin_dir()
    if origin:
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(origin)), "shared",
                                       "reference"))
    for c in candidates:
        if os.path.isdir(c):
            return c
    return candidates[0]
