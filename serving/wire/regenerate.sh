#!/usr/bin/env bash
# Regenerate serving/wire/serving_apis_pb2.py from the checked-in .proto.
# Uses a throwaway venv with a protoc matching protobuf 4.25 (grpcio-tools 1.62.x).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${PROTOC_VENV:-/tmp/protoc-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q grpcio-tools==1.62.3 protobuf==4.25.9
fi
OUT="$(mktemp -d)"
"$VENV/bin/python" -m grpc_tools.protoc -I "$HERE/proto" --python_out="$OUT" \
  "$HERE/proto/tfs_stack/wire/serving_apis.proto"
sed "s/'tfs_stack.wire.serving_apis_pb2'/'serving.wire.serving_apis_pb2'/" "$OUT/tfs_stack/wire/serving_apis_pb2.py" > "$HERE/serving_apis_pb2.py"
rm -rf "$OUT"
echo "wrote $HERE/serving_apis_pb2.py"
