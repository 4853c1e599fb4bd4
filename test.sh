#!/usr/bin/env bash
# Installs what is missing, builds Gleaner into build/ and runs the whole test suite with ctest.
# Extra arguments go to ctest: ./test.sh -L unit runs the unit tests only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

installers/install-deps.sh

# Two jobs at most: a translation unit that includes torch takes over a gigabyte to compile.
jobs=${GLEANER_JOBS:-2}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGLEANER_WERROR=ON
cmake --build build --parallel "$jobs"

cd build
if ! ctest --output-on-failure --parallel "$jobs" "$@"; then
    echo >&2
    echo "test.sh: TESTS FAILED (see the output above; rerun one with: ctest --test-dir build -R NAME -V)" >&2
    exit 1
fi
