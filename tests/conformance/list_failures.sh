#!/usr/bin/env bash
# Prints the ONNX node tests that fail now, one per line with the reason as a comment, in the
# format of expected_failures.txt. For reviewing the list: it may only shrink, so a new line
# needs its reason in the commit message.
#   tests/conformance/list_failures.sh build/kiln build/nodetests > /tmp/now.txt
set -uo pipefail
kiln="${1:-build/kiln}"; dir="${2:-build/nodetests}"
"$kiln" test "$dir" | sed -n 's/^FAIL \([^:]*\): \(.*\)$/\1  # \2/p' | cut -c1-220 | sort
