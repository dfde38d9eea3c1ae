#!/usr/bin/env bash
# Load CANN's environment, then exec the worker (exec: SIGTERM from `docker stop` reaches it directly).
set -euo pipefail
for env_script in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh; do
  if [ -f "$env_script" ]; then
    # shellcheck disable=SC1090
    source "$env_script"
  fi
done
if [ -d /usr/local/Ascend/driver/lib64 ]; then
  export LD_LIBRARY_PATH="/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common:${LD_LIBRARY_PATH:-}"
fi
exec "$@"
