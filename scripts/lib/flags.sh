# The benchmark scripts' flags: one way to take arguments. A script sets SCRIPT (its name) and its defaults,
# then loops over "$@" with its own `case`, calling these for what every script shares:
#   flag_value "$@"          the flag in $1 has its value in $2 (else: refused, exit 2)
#   flag_unknown "$1"        an argument nobody takes: refused by name, exit 2
#   flag_help N              prints the script's header comment (its lines 2..N) and exits 0
flag_die() { echo "$SCRIPT: $*" >&2; exit 2; }
flag_value() { [ $# -ge 2 ] || flag_die "$1 needs a value"; }
flag_unknown() { flag_die "unknown argument '$1' (--help lists them)"; }
flag_help() { sed -n "2,${1}p" "$0" | sed 's/^# \{0,1\}//'; exit 0; }
flag_count() {  # flag_count FLAG VALUE: a whole number
  [[ "$2" =~ ^[0-9]+$ ]] || flag_die "$1 takes a whole number, not '$2'"
}
