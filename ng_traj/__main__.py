"""``python -m ng_traj``."""

from ng_traj.cli import main

main()
