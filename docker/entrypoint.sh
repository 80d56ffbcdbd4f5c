#!/bin/bash
# docker/entrypoint.sh: the CPU image's entry point (/usr/local/bin/docker-entrypoint): runs
# `inflight serve` as PID 1 (exec: SIGTERM from docker stop reaches it and starts the drain).
#
#   docker run ... inflight:cpu [serve options...]   serve, with these options after the defaults
#                                                    (--help: serve's options)
#   docker run ... inflight:cpu serve [options...]   the same
#   docker run ... inflight:cpu generate|tokenize|make-model|client|db|bench|version ...
#                                                    that inflight command
#   docker run ... inflight:cpu bash                 any other program
#   docker-entrypoint healthcheck                    the image's HEALTHCHECK: GET /readyz
#
# What serve gets (an option given on the command line wins: the last one counts):
#   --model   $MODEL, else /models (when it holds config.json + model.safetensors), else
#             /models/gpt2, else the one directory under /models holding a model, else a random
#             GPT-2-124M-shaped demo model made in /models/demo-random on first start (loudly, as
#             scripts/serve.sh does: the text is gibberish, the machinery is real)
#   --host $HOST (0.0.0.0)  --port $PORT (8080)  --db $DB (/data/inflight.db)  --grace $GRACE (10)
#   --web /usr/share/inflight/web   (the vocabulary: the model's own, else $INFLIGHT_VOCAB_DIR)
#   --allowed-hosts localhost,127.0.0.1,::1[,$ALLOWED_HOSTS]   (see "Host check" below)
#   --allowed-origins $ALLOWED_ORIGINS  (when set)   --api-key-file $API_KEY_FILE  (when set)
#
# Host check. Inside a container serve must bind 0.0.0.0 to be reachable through a published
# port, and bound to a non-loopback address serve answers any Host unless --allowed-hosts is
# given: a DNS-rebinding page could then reach a server published on the host's loopback
# (-p 127.0.0.1:8080:8080). So the entry point keeps the native default's rule: only the loopback
# names (http://localhost:PORT, http://127.0.0.1:PORT, http://[::1]:PORT: a published port or host
# networking, seen from the docker host) unless ALLOWED_HOSTS names more: the name a browser or
# client uses (chat.example.com, a LAN address, the name a reverse proxy passes on) or * for any
# (behind a proxy that checks Host itself, or for Kubernetes probes, which send the pod's IP).
# Origins need nothing: the page this server serves is same-origin whatever the published port
# (its Origin's host:port equals the Host it was sent to); ALLOWED_ORIGINS adds others.
#
# Volumes: /models and /data must be writable by the image's user, inflight (uid 10001, gid 10001)
# for the demo model and the log: a fresh named volume is (docker copies the image's ownership);
# a bind-mounted directory: chown 10001:10001 DIR, or docker run --user "$(id -u):$(id -g)".
# A model mounted read-only (-v /path/to/gpt2:/models/gpt2:ro) needs only /data writable.
#
# With host networking (--network host) 0.0.0.0 is every address of the host: use HOST=127.0.0.1
# to keep it on loopback.
#
# Stopping: docker stop sends SIGTERM: no new requests, those running may finish within GRACE
# seconds, then connections close (up to 3.5 s) and the log is flushed (up to 5 s). Docker kills
# the container after its stop timeout (default 10 s): use docker stop -t $((GRACE + 15)) or
# docker run --stop-timeout 25 (compose: stop_grace_period: 25s).
set -euo pipefail

self=docker-entrypoint

# ---- healthcheck: GET /readyz on the port serve listens on (read from its command line) --------
if [ "${1:-}" = healthcheck ]; then
  host='' port=''
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = inflight ] || continue
    mapfile -d '' -t argv <"$p/cmdline" 2>/dev/null || continue
    [ "${argv[1]:-}" = serve ] || continue
    for ((i = 2; i < ${#argv[@]}; i++)); do
      case ${argv[i]} in
        --host) host=${argv[i + 1]:-} ;;
        --host=*) host=${argv[i]#--host=} ;;
        --port) port=${argv[i + 1]:-} ;;
        --port=*) port=${argv[i]#--port=} ;;
      esac
    done
    break
  done
  [ -n "$port" ] || port=${PORT:-8080}
  case $host in
    '' | 0.0.0.0 | '*') host=127.0.0.1 ;;
    :: | '[::]') host=::1 ;;
    localhost) host=127.0.0.1 ;;
  esac
  host=${host#[}
  host=${host%]}
  exec 3<>"/dev/tcp/$host/$port" || { echo "unhealthy: cannot connect to $host:$port"; exit 1; }
  printf 'GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
  IFS= read -r -t 3 status <&3 || status=
  status=${status%$'\r'}
  IFS= read -r -t 1 -d '' body <&3 || true
  exec 3<&-
  echo "$status ${body##*$'\r\n\r\n'}"
  case $status in "HTTP/1.1 200"*) exit 0 ;; *) exit 1 ;; esac
fi

# ---- another command ----------------------------------------------------------------------------
case ${1:-} in
  serve) shift ;;
  "" | -*) ;;
  generate | tokenize | make-model | client | db | bench | version | help)
    exec inflight "$@" ;;
  *) exec "$@" ;;
esac

# ---- serve --------------------------------------------------------------------------------------
# first, the device serve will use: the CUDA image without a usable GPU says so here, then serves
# on the CPU ("device: cpu (auto: no usable CUDA device: ...; using the CPU)")
inflight version --devices | sed -n "s/^device: /$self: device: /p; s/^cpu: /$self: cpu: /p" >&2
for a in "$@"; do
  case $a in -h | --help) exec inflight serve --help ;; esac
done
has_opt() { # has_opt NAME ARGS...: is --NAME (or --NAME=...) among ARGS?
  local name=$1 a
  shift
  for a in "$@"; do
    [ "$a" = "--$name" ] || [ "${a#--"$name"=}" != "$a" ] && return 0
  done
  return 1
}
is_model() { [ -f "$1/config.json" ] && [ -f "$1/model.safetensors" ]; }

defaults=()
if ! has_opt model "$@"; then
  model=${MODEL:-}
  if [ -n "$model" ]; then
    is_model "$model" || { echo "$self: MODEL=$model holds no config.json + model.safetensors" >&2; exit 1; }
  elif is_model /models; then
    model=/models
  elif is_model /models/gpt2; then
    model=/models/gpt2
  else
    found=()
    for d in /models/*/; do
      d=${d%/}
      [ "$d" != /models/demo-random ] && is_model "$d" && found+=("$d")
    done
    if [ ${#found[@]} -eq 1 ]; then
      model=${found[0]}
    elif [ ${#found[@]} -gt 1 ]; then
      echo "$self: several models under /models (${found[*]}): choose one with MODEL=DIR" >&2
      exit 1
    else
      model=/models/demo-random
      if ! is_model "$model"; then
        bar='************************************************************************'
        {
          echo "$self: $bar"
          echo "$self: NO MODEL in /models: mount a Hugging Face GPT-2 directory, e.g."
          echo "$self:   -v /path/to/gpt2:/models/gpt2:ro   (scripts/fetch-model.sh gpt2 fetches one)"
          echo "$self: MAKING A RANDOM GPT-2-124M-SHAPED DEMO MODEL in $model:"
          echo "$self: random weights: THE TEXT IS GIBBERISH, the machinery is real"
          echo "$self: $bar"
        } >&2
        if [ ! -w /models ]; then
          echo "$self: /models is not writable by uid $(id -u): mount a volume there (a named" \
               "volume, or a directory owned by uid $(id -u)), or a model" >&2
          exit 1
        fi
        tmp=/models/.demo-random.tmp.$$
        rm -rf "$tmp"
        inflight make-model --out "$tmp" --preset gpt2 --scale 0.02 --seed 1 --dtype bf16
        rm -rf "$model"
        mv "$tmp" "$model"
      fi
      echo "$self: serving the RANDOM demo model $model (gibberish)" >&2
    fi
  fi
  defaults+=(--model "$model")
fi

db=${DB:-/data/inflight.db}
if ! has_opt db "$@"; then
  mkdir -p "$(dirname "$db")" 2>/dev/null || true
  defaults+=(--db "$db")
fi
defaults+=(--host "${HOST:-0.0.0.0}" --port "${PORT:-8080}" --grace "${GRACE:-10}")
has_opt web "$@" || defaults+=(--web /usr/share/inflight/web)
if [ "${ALLOWED_HOSTS:-}" = '*' ]; then
  defaults+=(--allowed-hosts '*')
else
  defaults+=(--allowed-hosts "localhost,127.0.0.1,::1${ALLOWED_HOSTS:+,$ALLOWED_HOSTS}")
fi
[ -n "${ALLOWED_ORIGINS:-}" ] && defaults+=(--allowed-origins "$ALLOWED_ORIGINS")
[ -n "${API_KEY_FILE:-}" ] && defaults+=(--api-key-file "$API_KEY_FILE")

echo "$self: inflight serve ${defaults[*]} $*" >&2
exec inflight serve "${defaults[@]}" "$@"
