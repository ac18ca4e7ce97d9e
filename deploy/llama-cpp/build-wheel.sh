#!/usr/bin/env bash
# Builds the llama-cpp-python wheel that the SmolLM2 backend loads, into OUT_DIR, and shows where the
# build stands every TICK_S seconds (the compile takes minutes and pip prints nothing until it ends).
#
#   deploy/llama-cpp/build-wheel.sh PYTHON OUT_DIR REQUIREMENT
#
# PYTHON is an interpreter with pip; the verbose build goes to OUT_DIR/llama-cpp-python-build.log and
# its last 40 lines are printed when it fails. Exits with pip's status.
set -uo pipefail

python=$1 out=$2 requirement=$3
log="$out/llama-cpp-python-build.log"
# Under the 30 s a reader of a CI log waits at most for a line (the tests shorten it).
TICK_S=${LLAMA_BUILD_TICK_S:-20}

# What the build compiles is only what `llama_cpp.Llama` loads for a text model: ggml's CPU backend and
# libllama, 74 compile units of the 178 the package builds by default (what each costs:
# docs/performance.md).
#   GGML_NATIVE=OFF       no -march=native: a wheel built on one CPU must load on another (the native
#                         build segfaults on some CPUs, AMX); the AVX2/FMA/F16C baseline stays on.
#   LLAVA_BUILD=OFF       llama-cpp-python's libmtmd (tools/mtmd, 51 units: clip and the vision and
#                         audio models), never loaded for a text model.
#   LLAMA_BUILD_TOOLS, _EXAMPLES, _TESTS, _SERVER, _APP=OFF
#                         llama.cpp's programs; off by default when llama.cpp is a subproject, set so a
#                         release that changes the default cannot bring them back.
#   LLAMA_OPENSSL=OFF     HTTPS for llama.cpp's model downloads; the model is a local file.
#   LLAMA_BUILD_COMMON    llama.cpp's common library (52 units: argument parsing, chat templates, HTTP),
#                         which the Python package never loads. llama-cpp-python forces it on in the
#                         cache, so an -D cannot turn it off; a script run right after llama.cpp's
#                         project() (CMAKE_PROJECT_llama.cpp_INCLUDE) shadows it with an OFF for
#                         llama.cpp's directories, as the package's own WebAssembly build turns it off.
without_common=$(mktemp --suffix=.cmake) || exit 1
trap 'rm -f "$without_common"' EXIT
echo 'set(LLAMA_BUILD_COMMON OFF)' > "$without_common"
cmake_args=(
  -DGGML_NATIVE=OFF
  -DLLAVA_BUILD=OFF
  -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
  -DLLAMA_OPENSSL=OFF
  "-DCMAKE_PROJECT_llama.cpp_INCLUDE=$without_common"
)

mkdir -p "$out" || exit 1
start=$SECONDS
CMAKE_ARGS="${cmake_args[*]}" "$python" -m pip --disable-pip-version-check wheel -v --no-deps \
  --no-cache-dir -w "$out" "$requirement" > "$log" 2>&1 &
build=$!

# Ninja numbers its steps ("[done/total] <compiler or linker command> -o <output> ..."): the last
# numbered line is where the build stands, shown with its output where it names one (the last steps,
# symlinks, do not: then the count alone; the wheel is packed after the last).
while :; do
  tick=$((SECONDS + TICK_S))
  while [ "$SECONDS" -lt "$tick" ]; do kill -0 "$build" 2> /dev/null || break 2; sleep 1; done
  step=$(grep -aE '^ *\[[0-9]+/[0-9]+\] ' "$log" | tail -n 1 \
         | sed -nE 's#^ *(\[[0-9]+/[0-9]+\]).* -o ([^ ]*/)?([^ /]+/[^ /]+) .*#\1 \3#p; t; s#^ *(\[[0-9]+/[0-9]+\]).*#\1#p')
  echo "smollm2: building llama-cpp-python, $((SECONDS - start)) s: ${step:-configuring}"
done
wait "$build"
status=$?
if [ "$status" -eq 0 ]; then
  echo "smollm2: llama-cpp-python built in $((SECONDS - start)) s (log: $log)"
else
  tail -n 40 "$log"
  echo "smollm2: llama-cpp-python build failed after $((SECONDS - start)) s (log: $log)"
fi
exit "$status"
