"""``python -m mmport``."""

from mmport.cli import main

main()
