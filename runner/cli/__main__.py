"""python -m runner.cli"""

from runner.cli import main

main()
