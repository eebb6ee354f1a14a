#!/bin/sh
# Stands in for spotlab-worker in the provider tests: takes --config FILE,
# keeps a copy of the config it was given (the provider adds "metadata"),
# then waits to be stopped.
[ "$1" = "--config" ] && [ -r "$2" ] || { echo "usage: $0 --config FILE" >&2; exit 2; }
cp "$2" seen-config.json
exec sleep 60
