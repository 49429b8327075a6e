#!/usr/bin/env python3
"""A game launcher in Python (standard library only, 3.11+) that drives patchwell's single
executable, `launcher-client`, over its `--events` protocol (docs/launcher-protocol.md).

One start of the launcher: install or update the game, verify it and repair it when it is not
whole, install the addons asked for, and take a settings snapshot; a one-line progress display
while it works, and a sentence a player can act on when something fails (by the error's kind).

    launcher.py --client ./launcher-client-linux-x64 --server https://updates.example.com \
        --trust signing-keys.json --state ~/.mygame-launcher --game-dir ~/Games/MyGame --app mygame \
        [--addon SLUG ...] [--full-verify]

The client's path may also come from $PATCHWELL_CLIENT. Exit status: 0 when the game is ready,
1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

#: The protocol version this launcher was written for: a client speaking another one is refused.
PROTOCOL = 1

#: Kinds whose failure means an answer or file was refused by verification (nothing was used).
VERIFICATION_KINDS = {
    "signature",
    "digest",
    "stale",
    "rollback",
    "integrity",
    "publisher-signature",
    "archive",
    "manifest",
}


class ClientError(Exception):
    """An `error` event (or a client that ended without a `result`): its kind, sentence and fields."""

    def __init__(self, event: dict[str, Any], exit_status: int) -> None:
        super().__init__(event.get("error", "the launcher client failed"))
        self.kind: str = event.get("kind", "internal")
        self.event = event
        self.exit_status = exit_status

    def advice(self) -> str:
        """What to tell the player, by kind (kinds this launcher does not know get the client's sentence)."""
        e = self.event
        if self.kind == "in-use":
            return f"A game file is in use ({e['error']}). Close the game and try again."
        if self.kind == "busy":
            return "Another launcher is already working on this game folder; wait for it to finish."
        if self.kind == "unsafe-path":
            return f"The game folder holds a link the launcher will not write through: {e['error']}"
        if self.kind == "blocked":
            return f"Something is in the way of a game file and was left alone: {e['error']}"
        if self.kind == "disk-space":
            need = e.get("bytesNeeded", 0) - e.get("bytesFree", 0)
            return f"Not enough free disk space: free {need / 1048576:.0f} MiB more and try again."
        if self.kind == "clock":
            return e["error"]  # already a sentence for the player ("this computer's clock is ...")
        if self.kind in ("network", "http"):
            return f"The update service cannot be reached right now ({e['error']}); try again later."
        if self.kind in VERIFICATION_KINDS:
            return f"An update was refused because it failed verification ({self.kind}); nothing was changed."
        if self.kind == "usage":
            return f"The launcher asked the client something it cannot do (a bug): {e['error']}"
        return f"The launcher client failed ({self.kind}): {e['error']}"


class ProgressLine:
    """One line on the terminal, redrawn in place for each progress event."""

    def __init__(self, out=sys.stdout) -> None:
        self.out = out
        self.width = 0

    def show(self, label: str, event: dict[str, Any]) -> None:
        phase = event.get("phase", "")
        done, total, unit = event.get("bytes", 0), event.get("total", 0), event.get("unit", "bytes")
        what = event.get("addon") or event.get("file") or ""
        if total <= 0:  # a phase without a measure: just say what is happening
            text = f"{label}: {phase} {what}".rstrip() + " ..."
        else:
            share = min(1.0, done / total)
            bar = "#" * round(share * 24)
            if unit == "bytes":
                amount = f"{done / 1048576:.1f}/{total / 1048576:.1f} MiB {event.get('rate', 0) / 1048576:.1f} MiB/s"
            else:
                amount = f"{done}/{total} {unit}"
            text = f"{label}: {phase:<8} [{bar:<24}] {share * 100:3.0f}% {amount} {what}".rstrip()
        columns = shutil.get_terminal_size((100, 20)).columns - 1
        text = text[:columns]
        self.out.write("\r" + text + " " * max(0, self.width - len(text)))
        self.out.flush()
        self.width = len(text)

    def end(self) -> None:
        if self.width > 0:
            self.out.write("\n")
            self.out.flush()
        self.width = 0


@dataclass
class Client:
    """The `launcher-client` executable and the options every command of this launcher shares."""

    path: str
    server: str
    trust: str
    state: str
    game_dir: str
    app: str
    progress: ProgressLine = field(default_factory=ProgressLine)

    def run(self, label: str, *args: str, ok_statuses: tuple[int, ...] = (0,)) -> dict[str, Any]:
        """Runs one command with --events; answers its `result` (without "event"), raises ClientError on `error`."""
        command = [self.path, *args, "--events"]
        result: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        # stderr stays the launcher's: in events mode the client writes nothing there unless Node itself fails.
        with subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, encoding="utf-8") as child:
            assert child.stdout is not None
            for line in child.stdout:
                event = json.loads(line)
                name = event.get("event")
                if name == "start":
                    if event.get("protocol") != PROTOCOL:
                        child.kill()
                        raise ClientError({"kind": "usage", "error": f"client speaks protocol {event.get('protocol')}, not {PROTOCOL}"}, 1)
                elif name == "progress":
                    self.progress.show(label, event)
                elif name == "log":
                    self.progress.end()
                    print(f"{label}: {event.get('level', 'info')}: {event.get('message')}", file=sys.stderr)
                elif name == "result":
                    result = {k: v for k, v in event.items() if k != "event"}
                elif name == "error":
                    error = event
                # Any other event is one this launcher does not know: ignored, as the protocol asks.
            status = child.wait()
        self.progress.end()
        if error is not None:
            raise ClientError(error, status)
        if result is None:
            raise ClientError({"kind": "internal", "error": f"the client ended (exit {status}) without a result"}, status)
        if status not in ok_statuses:
            raise ClientError({"kind": "internal", "error": f"the client exited {status}: {result}"}, status)
        return result

    def online(self) -> list[str]:
        return ["--server", self.server, "--trust", self.trust, "--state", self.state, "--game-dir", self.game_dir]

    def game(self, command: str, *more: str, ok_statuses: tuple[int, ...] = (0,)) -> dict[str, Any]:
        return self.run(command, "game", command, *self.online(), "--app", self.app, *more, ok_statuses=ok_statuses)


def start(client: Client, addons: list[str], full_verify: bool, say: Callable[[str], None]) -> None:
    """One start of the launcher: update, verify (repair when needed), addons, settings snapshot."""
    status = client.run("status", "game", "status", "--state", client.state, "--game-dir", client.game_dir)
    installed = status.get("installed")
    say(f"installed: {installed['version'] if installed else 'nothing yet'}")

    update = client.game("update")
    if update["result"] == "up-to-date":
        say(f"game: up to date (build {update['to']})")
    else:
        files = update["files"]
        say(
            f"game: {update['result']} build {update['to']} "
            f"({files['added']} added, {files['changed']} changed, {files['removed']} removed; "
            f"{update['downloadedBytes']} bytes downloaded, {update['reusedBytes']} reused)"
        )

    # update already rebuilt what a quick look (sizes, times) finds changed; verify --full hashes every
    # file (a player's "check the game files"). It exits 3 with its result when the game is not whole.
    depth = ("--full",) if full_verify else ()
    verify = client.game("verify", *depth, ok_statuses=(0, 3))
    if verify["ok"]:
        say("verify: ok")
    else:
        say(f"verify: damaged {verify['damaged']}, missing {verify['missing']}: repairing")
        repair = client.game("repair")
        say(f"repair: {len(repair['repaired'])} file(s) restored, {repair['downloadedBytes']} bytes downloaded")
        if not client.game("verify", *depth)["ok"]:
            raise ClientError({"kind": "integrity", "error": "the game is still not whole after a repair"}, 1)
        say("verify: ok")

    if addons:
        online = ["--server", client.server, "--trust", client.trust, "--state", client.state, "--game-dir", client.game_dir]
        installed_addons = client.run("addons", "addons", "install", *addons, *online)["installed"]
        say("addons: " + ", ".join(f"{a['slug']} {a['version']}" for a in installed_addons))

    snapshot = client.run(
        "backup", "backup", "create", "--state", client.state, "--game-dir", client.game_dir, "--label", "launcher start"
    )["backup"]
    backups = client.run("backups", "backup", "list", "--state", client.state)["backups"]
    say(f"settings snapshot: {snapshot['id']} ({snapshot['files']} files); {len(backups)} kept")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--client", default=os.environ.get("PATCHWELL_CLIENT"), help="the launcher-client executable")
    parser.add_argument("--server", required=True)
    parser.add_argument("--trust", required=True, help="the service's signing keys (JSON)")
    parser.add_argument("--state", required=True, help="the launcher's state folder")
    parser.add_argument("--game-dir", required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--addon", action="append", default=[], help="an addon to install (repeatable)")
    parser.add_argument("--full-verify", action="store_true", help="hash every game file, not only the changed-looking ones")
    options = parser.parse_args(argv)
    if not options.client:
        parser.error("--client (or $PATCHWELL_CLIENT) is required")
    client = Client(options.client, options.server, options.trust, options.state, options.game_dir, options.app)
    try:
        start(client, options.addon, options.full_verify, print)
    except ClientError as err:
        print(f"error ({err.kind}): {err.advice()}", file=sys.stderr)
        return 1
    except OSError as err:  # the executable is missing or cannot run
        print(f"error: cannot run {options.client}: {err}", file=sys.stderr)
        return 1
    print("ready to play")
    return 0


if __name__ == "__main__":
    sys.exit(main())
