package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/blendplane/blendplane/lesson"
)

// lessonCmd helps lesson authors: keygen makes an Ed25519 key pair, sign
// signs a lesson pack for POST /lesson.
func (c *cli) lessonCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageErr(errors.New("usage: blendctl lesson keygen|sign ..."))
	}
	switch args[0] {
	case "keygen":
		fs := flag.NewFlagSet("lesson keygen", flag.ContinueOnError)
		priv := fs.String("private", "lesson-key.pem", "where to write the private key (PKCS #8 PEM, mode 0600)")
		pub := fs.String("public", "lesson-key.pub.pem", "where to write the public key (PEM), for --lesson-public-key")
		if err := fs.Parse(args[1:]); err != nil {
			return usageErr(err)
		}
		if err := lesson.GenerateKey(*priv, *pub); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "private key %s, public key %s\n", *priv, *pub)
		return nil
	case "sign":
		fs := flag.NewFlagSet("lesson sign", flag.ContinueOnError)
		keyFile := fs.String("key", "lesson-key.pem", "the private key (PKCS #8 PEM, as keygen or openssl genpkey -algorithm ed25519 write)")
		stamp := fs.Bool("stamp", true, "set metadata.issued_at to now before signing")
		file, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		key, err := lesson.LoadPrivateKey(*keyFile)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		pack, _, perr := lesson.ParsePack(data)
		if perr != nil {
			return perr
		}
		if *stamp {
			md := map[string]any{}
			if len(pack.Metadata) > 0 && string(pack.Metadata) != "null" {
				if err := json.Unmarshal(pack.Metadata, &md); err != nil {
					return err
				}
			}
			md["issued_at"] = time.Now().Unix()
			if pack.Metadata, err = json.Marshal(md); err != nil {
				return err
			}
		}
		pack.Signature = nil
		if err := lesson.Sign(pack, key); err != nil {
			return err
		}
		out, err := json.MarshalIndent(pack, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(c.out, string(out))
		return nil
	}
	return usageErr(fmt.Errorf("unknown lesson command %q (try: keygen, sign)", args[0]))
}
