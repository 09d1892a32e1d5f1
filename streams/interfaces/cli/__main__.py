from streams.interfaces.cli.main import main

main()
