from muster.cli import main

main()
