#!/usr/bin/env bash
# Fetch real GRIB files that nobody in this project wrote, from public source
# distributions on PyPI, into $HAAR_TESTDATA (default: <repo>/.testdata, gitignored).
#
# Idempotent: a package whose files are already extracted is skipped, so a second
# run costs one `ls`. Pins are exact so the files (and their message counts) do
# not change under the tests.
#
# Layout:  $HAAR_TESTDATA/grib/<package>/<file>   plus a .done-<package>-<version> stamp.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
dest="${HAAR_TESTDATA:-$repo/.testdata}/grib"
mkdir -p "$dest"

# package==version  and the glob of GRIB files inside its sdist
packages=(
  "cfgrib==0.9.15.1|*/tests/sample-data/*.grib*"
  "earthkit-data==1.3.0|*/tests/data/*.grib*"
)

pip_cmd() {
  if command -v pip >/dev/null 2>&1; then pip "$@"; else python3 -m pip "$@"; fi
}

for entry in "${packages[@]}"; do
  spec="${entry%%|*}"
  glob="${entry#*|}"
  name="${spec%%==*}"
  version="${spec##*==}"
  stamp="$dest/.done-$name-$version"
  if [[ -f "$stamp" ]]; then
    continue
  fi
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-testdata: downloading $spec sdist" >&2
  # pip prepares the sdist's metadata in an isolated build environment
  # (fetching setuptools), which takes some seconds; it runs once per pin.
  pip_cmd download --quiet --no-deps --no-binary :all: --dest "$tmp" "$spec" >&2
  archive="$(find "$tmp" -maxdepth 1 -type f \( -name '*.tar.gz' -o -name '*.zip' \) | head -n1)"
  [[ -n "$archive" ]] || { echo "fetch-testdata: no sdist for $spec" >&2; exit 1; }
  mkdir -p "$dest/$name"
  case "$archive" in
    *.tar.gz) tar -xzf "$archive" -C "$tmp" --wildcards "$glob" ;;
    *.zip) (cd "$tmp" && unzip -q "$archive" "$glob") ;;
  esac
  find "$tmp" -mindepth 2 -type f -name '*.grib*' -exec cp {} "$dest/$name/" \;
  count="$(ls "$dest/$name" | wc -l)"
  [[ "$count" -gt 0 ]] || { echo "fetch-testdata: $spec had no GRIB files matching $glob" >&2; exit 1; }
  echo "fetch-testdata: $name $version: $count files in $dest/$name" >&2
  rm -rf "$tmp"
  trap - EXIT
  touch "$stamp"
done
echo "$dest"
