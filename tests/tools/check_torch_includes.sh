#!/bin/sh
# Torch's headers are slow to compile and must not leak: only shared/ml/*.cpp may include them.
# Usage: check_torch_includes.sh SOURCE_DIR
cd "$1" || exit 2
bad=$(grep -rlE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](torch|ATen|c10)/' \
        --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.cc' \
        agent coordinator gui shared tests 2>/dev/null | grep -vE '^shared/ml/[^/]+\.cpp$')
if [ -n "$bad" ]; then
    echo "torch headers included outside shared/ml/*.cpp:"
    echo "$bad"
    exit 1
fi
echo "torch headers are included only by shared/ml/*.cpp"
