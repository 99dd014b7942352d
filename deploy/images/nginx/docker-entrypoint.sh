#!/bin/sh
# The official nginx image's template step, written for Debian's nginx: for the `nginx` command,
# every /etc/nginx/templates/**/*.template becomes NGINX_ENVSUBST_OUTPUT_DIR/<path without .template>,
# with only the environment variables whose names match NGINX_ENVSUBST_FILTER substituted.
set -eu
if [ "${1:-}" = nginx ] || [ "${1:-}" = nginx-debug ]; then
  templates=${NGINX_ENVSUBST_TEMPLATE_DIR:-/etc/nginx/templates}
  suffix=${NGINX_ENVSUBST_TEMPLATE_SUFFIX:-.template}
  out=${NGINX_ENVSUBST_OUTPUT_DIR:-/etc/nginx/conf.d}
  filter=${NGINX_ENVSUBST_FILTER:-}
  defined=$(env | cut -d= -f1 | grep -E "${filter:-.}" | sed 's/.*/${&}/' | tr '\n' ' ')
  if [ -d "$templates" ]; then
    find "$templates" -follow -type f -name "*$suffix" -print | while read -r template; do
      relative=${template#"$templates"/}
      target="$out/${relative%"$suffix"}"
      mkdir -p "$(dirname "$target")"
      echo "$0: rendering $template to $target"
      envsubst "$defined" < "$template" > "$target"
    done
  fi
fi
exec "$@"
