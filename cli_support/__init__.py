"""What every `icache` subcommand module shares, below the console script: argument
types (a bad flag value fails at parse time) and the usage habits (the usage error,
quieting the client libraries). It imports the standard library only, so the process
packages, the install tooling and the console script may all import it without any
of them importing another back.
"""
