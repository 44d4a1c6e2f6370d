#!/usr/bin/env bash
# The console's browser test (tests/integration/test_console_browser.py): Debian's Chromium
# and its chromedriver, driven headless by Selenium; nothing downloads a browser at run time.
# The machines run as root; packages already there are kept.
#
# usage: scripts/chromium.sh
set -euo pipefail

wanted=()
command -v chromium >/dev/null || wanted+=(chromium)
command -v chromedriver >/dev/null || wanted+=(chromium-driver)
if [ ${#wanted[@]} -gt 0 ]; then
    echo "chromium: installing Debian's ${wanted[*]}" >&2
    # A fresh machine has no package lists yet: refresh them once and retry. Another apt
    # or dpkg holding the lock is waited for, up to 10 minutes.
    if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${wanted[@]}" >/dev/null 2>&1; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${wanted[@]}" >/dev/null
    fi
fi
