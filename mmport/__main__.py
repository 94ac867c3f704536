"""``python -m mmport``."""

from mmport.launch import main

main()
