package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// shells are the shells completion writes a script for.
var shells = map[string]func(w io.Writer){"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}

func completion(_ context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	if fs.NArg() != 1 || shells[fs.Arg(0)] == nil {
		fmt.Fprintln(stderr, "switchboard completion: give one shell: bash, zsh or fish (see switchboard completion --help)")
		return 2
	}
	shells[fs.Arg(0)](stdout)
	return 0
}

// compFlag is one flag of a command as completion offers it.
type compFlag struct {
	long, short string
	desc        string
	arg         string // "" for a boolean flag
}

// compFlags are command c's flags, --help included.
func compFlags(c *command) []compFlag {
	fs := c.newFlagSet()
	shorts := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if long, ok := strings.CutPrefix(f.Usage, shortFor); ok {
			shorts[long] = f.Name
		}
	})
	var out []compFlag
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, shortFor) {
			return
		}
		arg, desc := flag.UnquoteUsage(f)
		out = append(out, compFlag{long: f.Name, short: shorts[f.Name], desc: desc, arg: arg})
	})
	return append(out, compFlag{long: "help", short: "h", desc: "show the command's help"})
}

// completionArgs are the words a command takes after its flags.
func completionArgs(c *command) []string {
	switch c.name {
	case "completion":
		return []string{"bash", "fish", "zsh"}
	case "help":
		var names []string
		for _, c := range commands {
			names = append(names, c.name)
		}
		return names
	}
	return nil
}

func commandNames() string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	return strings.Join(names, " ")
}

func bashCompletion(w io.Writer) {
	fmt.Fprintf(w, `# bash completion for switchboard; made by "switchboard completion bash".
_switchboard() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W %q -- "$cur"))
        return
    fi
    case "${COMP_WORDS[1]} $prev" in
`, commandNames())
	for _, c := range commands {
		for _, f := range compFlags(c) {
			if f.arg == "" {
				continue
			}
			action := "COMPREPLY=()"
			if f.arg == "FILE" {
				action = `COMPREPLY=($(compgen -f -- "$cur"))`
			}
			pat := fmt.Sprintf("%q|%q", c.name+" --"+f.long, c.name+" -"+f.long)
			if f.short != "" {
				pat += fmt.Sprintf("|%q", c.name+" -"+f.short)
			}
			fmt.Fprintf(w, "        %s) %s; return ;;\n", pat, action)
		}
	}
	fmt.Fprint(w, "    esac\n    local flags args\n    case \"${COMP_WORDS[1]}\" in\n")
	for _, c := range commands {
		var flags []string
		for _, f := range compFlags(c) {
			flags = append(flags, "--"+f.long)
		}
		fmt.Fprintf(w, "        %s) flags=%q args=%q ;;\n", c.name, strings.Join(flags, " "), strings.Join(completionArgs(c), " "))
	}
	fmt.Fprint(w, "    esac\n    if [[ $cur == -* ]]; then\n        COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n    else\n        COMPREPLY=($(compgen -W \"$args\" -- \"$cur\"))\n    fi\n")
	fmt.Fprint(w, "}\ncomplete -o default -F _switchboard switchboard\n")
}

// zshQuote makes s safe inside a single-quoted _arguments or _describe
// spec.
func zshQuote(s string) string {
	return strings.NewReplacer("'", "", "[", "(", "]", ")", ":", `\:`).Replace(s)
}

func zshCompletion(w io.Writer) {
	fmt.Fprint(w, "#compdef switchboard\n# zsh completion for switchboard; made by \"switchboard completion zsh\".\n_switchboard() {\n  local -a cmds\n  cmds=(\n")
	for _, c := range commands {
		fmt.Fprintf(w, "    '%s:%s'\n", c.name, zshQuote(c.summary))
	}
	fmt.Fprint(w, "  )\n  if (( CURRENT == 2 )); then\n    _describe 'command' cmds\n    return\n  fi\n  case $words[2] in\n")
	for _, c := range commands {
		fmt.Fprintf(w, "    %s)\n      _arguments -s", c.name)
		for _, f := range compFlags(c) {
			spec := fmt.Sprintf("--%s[%s]", f.long, zshQuote(f.desc))
			if f.short != "" {
				spec = fmt.Sprintf("(-%s --%s)'{-%s,--%s}'[%s]", f.short, f.long, f.short, f.long, zshQuote(f.desc))
			}
			switch {
			case f.arg == "FILE":
				spec += ":file:_files"
			case f.arg != "":
				spec += ":" + strings.ToLower(f.arg) + ": "
			}
			fmt.Fprintf(w, " \\\n        '%s'", spec)
		}
		if args := completionArgs(c); len(args) > 0 {
			fmt.Fprintf(w, " \\\n        '1:argument:(%s)'", strings.Join(args, " "))
		}
		fmt.Fprint(w, "\n      ;;\n")
	}
	fmt.Fprint(w, "  esac\n}\n_switchboard \"$@\"\n")
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func fishCompletion(w io.Writer) {
	fmt.Fprint(w, "# fish completion for switchboard; made by \"switchboard completion fish\".\ncomplete -c switchboard -f\n")
	for _, c := range commands {
		fmt.Fprintf(w, "complete -c switchboard -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	for _, c := range commands {
		cond := fishQuote("__fish_seen_subcommand_from " + c.name)
		for _, f := range compFlags(c) {
			line := fmt.Sprintf("complete -c switchboard -n %s -l %s", cond, f.long)
			if f.short != "" {
				line += " -s " + f.short
			}
			switch {
			case f.arg == "FILE":
				line += " -r -F"
			case f.arg != "":
				line += " -x"
			}
			fmt.Fprintln(w, line+" -d "+fishQuote(f.desc))
		}
		if args := completionArgs(c); len(args) > 0 {
			fmt.Fprintf(w, "complete -c switchboard -n %s -a %s\n", cond, fishQuote(strings.Join(args, " ")))
		}
	}
}
