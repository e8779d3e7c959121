#!/usr/bin/env bash
# Makes sure `protoc` is on PATH: lance-table's build script compiles Lance's protobuf definitions with it. Installs
# Debian's protobuf-compiler when it is missing (as root with apt-get; with sudo otherwise); says what to do when it
# cannot. Used by .ci/run and by the README's test command.
set -euo pipefail
if ! command -v protoc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q protobuf-compiler >/dev/null
  elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q protobuf-compiler >/dev/null
  else
    echo "protoc is missing: install protobuf-compiler (apt-get install -y protobuf-compiler, brew install protobuf)" >&2
    exit 1
  fi
fi
protoc --version
