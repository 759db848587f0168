# Sourced by the scripts that run Python: sets KILN_PYTHON to the interpreter that has the pinned
# test packages (tests/requirements.txt): the system's python3, or the project's .venv where
# scripts/setup_deps.sh had to make one because the system's Python refuses pip.
# kiln_python_pinned PYTHON: true when PYTHON has every pinned version.
kiln_python_pinned() {
  "$1" - "$root/tests/requirements.txt" <<'PY' >/dev/null 2>&1
import sys
from importlib import metadata
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, version = line.split("==")
    if metadata.version(name) != version:
        sys.exit(1)
PY
}
if [ -x "$root/.venv/bin/python" ] && kiln_python_pinned "$root/.venv/bin/python"; then
  KILN_PYTHON="$root/.venv/bin/python"
else
  KILN_PYTHON=python3
fi
export KILN_PYTHON
