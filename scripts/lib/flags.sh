# The benchmark scripts' flags: one way to take arguments. A script sets SCRIPT (its name), its defaults and
# FLAGS, the flags it takes, each "--name:VAR" (a value) or "--name:VAR:count" (a whole number), then calls
#   flag_parse N "$@"        sets each VAR given, prints the script's header comment (lines 2..N) for
#                            --help and exits 0, and leaves the other arguments, in order, in the array pos
# A flag nobody takes, a flag without its value and a count that is not a whole number are refused by name
# (flag_die: exit 2), before anything runs.
flag_die() { echo "$SCRIPT: $*" >&2; exit 2; }
flag_value() { [ $# -ge 2 ] || flag_die "$1 needs a value"; }
flag_count() {  # flag_count FLAG VALUE: a whole number
  [[ "$2" =~ ^[0-9]+$ ]] || flag_die "$1 takes a whole number, not '$2'"
}
flag_parse() {
  local help=$1 spec name var kind found
  shift
  pos=()
  while [ $# -gt 0 ]; do
    case $1 in
      -h | --help) sed -n "2,${help}p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
      -*)
        found=
        for spec in "${FLAGS[@]}"; do
          IFS=: read -r name var kind <<<"$spec"
          [ "$1" = "$name" ] || continue
          flag_value "$@"
          [ "$kind" = count ] && flag_count "$1" "$2"
          printf -v "$var" '%s' "$2"
          found=1
          shift
          break
        done
        [ -n "$found" ] || flag_die "unknown argument '$1' (--help lists them)" ;;
      *) pos+=("$1") ;;
    esac
    shift
  done
}
