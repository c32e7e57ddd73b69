#!/usr/bin/env bash
# The Python module's suite: `pip install .` (as python/README.md says) into a virtualenv under
# build/, then tests/python with pytest against the CLI of the main build (build/mimi). Records
# its counts in the whole run's totals (scripts/lib-suite.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-suite.sh
py=${MIMI_PYTHON:-python3}
venv=build/pyenv
install_module() {
  { [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"; } &&
    "$venv/bin/pip" install -q --disable-pip-version-check numpy pytest &&
    "$venv/bin/pip" install -q --disable-pip-version-check .
}
step "python module (pip install .)" install_module || exit 1
echo "=== python tests"
xml=$(mktemp /tmp/mimi-pytest.XXXXXX)
(cd tests/python && MIMI_BIN="$PWD/../../build/mimi" "../../$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --junitxml="$xml" .)
rc=$?
counts=$("$venv/bin/python" - "$xml" <<'PY'
import sys, xml.etree.ElementTree as E
try:
    r = E.parse(sys.argv[1]).getroot()
except Exception:
    print("0 1 0"); sys.exit()
ts = r if r.tag == "testsuite" else r.find("testsuite")
t, f, s = int(ts.get("tests")), int(ts.get("failures")) + int(ts.get("errors")), int(ts.get("skipped"))
print(t - f - s, f, s)
PY
)
rm -f "$xml"
read -r p f s <<<"$counts"
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # pytest itself failed (a crash, no tests)
record "python" "$p" "$f" "$s"
[ "$rc" -eq 0 ]
