#!/bin/sh
# Stands in for spotlab-worker in the provider tests: takes --config FILE,
# keeps a copy of the config it was given (seen-config.json),
# starts a "job" in a process group of its own as spotlab-worker does (its pid
# in job.pid), then waits to be stopped.
[ "$1" = "--config" ] && [ -r "$2" ] || { echo "usage: $0 --config FILE" >&2; exit 2; }
perl -e 'setpgrp(0, 0); open(F, ">job.pid.tmp") && print(F "$$\n") && close(F) &&
  rename("job.pid.tmp", "job.pid"); exec "sleep", "60"' </dev/null >/dev/null 2>&1 &
cp "$2" seen-config.json
exec sleep 60
