#!/usr/bin/env bash
# archive HEAD for the device (helpers' uncommitted edits must not travel into timings)
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" && git archive HEAD -o .devrun/head.tar && git rev-parse --short HEAD > .devrun/head.rev && echo "head.tar at $(cat .devrun/head.rev)"
