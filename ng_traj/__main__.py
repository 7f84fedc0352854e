"""``python -m ng_traj``."""

from ng_traj.cli import main

if __name__ == "__main__":
    main()
