"""``python -m ng_traj`` and the ``ng-traj`` console script.

Importing the command-line layer takes a moment (pydantic models, pyarrow); an interrupt that
arrives before its signal handlers are installed ends the program with 130 and no traceback.
"""

import sys


def main() -> None:
    """Entry point: import the CLI, then run it (``ng_traj.cli.main``)."""
    try:
        from ng_traj.cli import main as run
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    run()


if __name__ == "__main__":
    main()
