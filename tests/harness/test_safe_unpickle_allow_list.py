"""The project's own unpickling allow-list (advisor.harness.safe_unpickle), tested on its own.

torch's weights-only loader refuses most payloads before the allow-list is asked, so the end-to-end hostile-file
tests never show that the allow-list itself holds (issue 29: adding `builtins.eval` to it passed the whole suite).
Here the restricted unpickler is asked directly, in a fresh interpreter (install() replaces `pickle` process-wide)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

from advisor.harness.safe_unpickle import ALLOWED_GLOBALS

# globals whose call runs code or touches the host; a pickle naming any of them must be refused while armed
DANGEROUS = [
    ("builtins", "eval"),
    ("builtins", "exec"),
    ("builtins", "getattr"),
    ("builtins", "__import__"),
    ("builtins", "open"),
    ("os", "system"),
    ("posix", "system"),
    ("subprocess", "Popen"),
    ("importlib", "import_module"),
    ("torch", "load"),
    ("torch.serialization", "load"),
    ("torch._C", "_pickle_load_obj"),
]
_PROBE = """
import json, pickle, sys
from advisor.harness import safe_unpickle
safe_unpickle.install()
refused = {}
with safe_unpickle.refusing_pickled_objects():
    for module, name in json.loads(sys.argv[1]):
        payload = b"c" + module.encode() + b"\\n" + name.encode() + b"\\n."  # protocol 0: GLOBAL, STOP
        try:
            pickle.loads(payload)
            refused[f"{module}.{name}"] = False
        except safe_unpickle.PickledObjectRefused:
            refused[f"{module}.{name}"] = True
        except Exception as exc:  # noqa: BLE001 - anything else means the allow-list let it through to import
            refused[f"{module}.{name}"] = f"{type(exc).__name__}"
print(json.dumps(refused))
"""


def test_every_dangerous_global_is_refused_by_the_allow_list_itself():
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(DANGEROUS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    refused = json.loads(done.stdout.strip().splitlines()[-1])
    assert refused == {f"{module}.{name}": True for module, name in DANGEROUS}


def test_the_allow_list_holds_only_tensor_rebuilding_names():
    """What a state dict needs and nothing that can call out: torch's rebuild functions, storage and tensor types,
    Size, device, Parameter, and OrderedDict."""
    for module, name in ALLOWED_GLOBALS:
        assert (module, name) == ("collections", "OrderedDict") or module.split(".")[0] == "torch", (module, name)
        assert not set(DANGEROUS) & {(module, name)}
        if module.startswith("torch"):
            assert (
                name.startswith(("_rebuild_", "Untyped"))
                or name.endswith("Storage")
                or name
                in {
                    "Size",
                    "device",
                    "Tensor",
                    "Parameter",
                }
            ), (module, name)
    assert pickle.loads(pickle.dumps(1)) == 1  # this process's pickle is untouched
