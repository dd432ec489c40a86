#!/usr/bin/env bash
# `make browser`: a Chromium for the browser test, and the emoji font the notebooks' checklists
# need (without it every ✅ renders as an empty box), each installed only when missing.
# Debian: apt-get install chromium. Ubuntu has no chromium deb (its chromium-browser package only
# installs the snap), so there: snap install chromium. As root, or through sudo where it needs no
# password; otherwise it prints the commands and `make test` skips the browser test (CI fails).
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" = 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    SUDO="none"
fi
os_id="$(. "${OS_RELEASE:-/etc/os-release}" 2>/dev/null && echo "${ID:-}")"
apt_updated=""

run_as_root() {  # run_as_root <what> <command...>: run it, or say how when we cannot
    local what="$1"; shift
    if [ "$SUDO" = none ]; then
        echo "Not root and no password-less sudo: install $what yourself: sudo $*"
        return 1
    fi
    echo "Installing $what: ${SUDO:+$SUDO }$*"
    $SUDO "$@"
}

apt_install() {  # apt_install <package...>
    command -v apt-get >/dev/null || { echo "No apt-get here: install $* by hand"; return 1; }
    if [ "$SUDO" = none ]; then
        echo "Not root and no password-less sudo: install $* yourself:" \
             "sudo apt-get update && sudo apt-get install -y $*"
        return 1
    fi
    if [ -z "$apt_updated" ]; then
        run_as_root "the package lists" apt-get update -q || return 1
        apt_updated=1
    fi
    run_as_root "$*" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

if chromium="$(python3 -m tests.browser.find_browser)"; then
    echo "Browser for the browser test: $("$chromium" --version 2>/dev/null || echo "$chromium")"
elif [ "$os_id" = ubuntu ]; then
    if command -v snap >/dev/null; then
        run_as_root "Chromium (a snap on Ubuntu)" snap install chromium
    else
        echo "Ubuntu without snapd: no Chromium package to install; point CHROMIUM=/path at one"
    fi
else
    apt_install chromium
fi

if dpkg-query -W -f='${Status}' fonts-noto-color-emoji 2>/dev/null | grep -q "ok installed" \
        || fc-list 2>/dev/null | grep -qi "Noto Color Emoji"; then
    echo "Emoji font: installed"
else
    apt_install fonts-noto-color-emoji
fi

if ! python3 -m tests.browser.find_browser >/dev/null; then
    echo "No Chromium: make test skips the browser test (under CI=true it fails)."
fi
exit 0
