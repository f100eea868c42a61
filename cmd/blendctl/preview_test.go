package main

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPreview(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 8, 4))
	for x := 0; x < 8; x++ {
		for y := 0; y < 4; y++ {
			c := color.RGBA{255, 0, 0, 255} // red top half
			if y >= 2 {
				c = color.RGBA{0, 0, 255, 255} // blue bottom half
			}
			img.Set(x, y, c)
		}
	}
	path := filepath.Join(t.TempDir(), "p.png")
	f, _ := os.Create(path)
	png.Encode(f, img)
	f.Close()
	var out bytes.Buffer
	if err := preview(&out, path); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || strings.Count(lines[0], "▀") != 8 {
		t.Fatalf("preview of an 8×4 image: %q", out.String())
	}
	if !strings.Contains(lines[0], "38;2;255;0;0m\x1b[48;2;255;0;0m") || !strings.Contains(lines[1], "38;2;0;0;255m\x1b[48;2;0;0;255m") {
		t.Fatalf("colours: %q", out.String())
	}
	if err := preview(&out, filepath.Join(t.TempDir(), "none.png")); err == nil {
		t.Fatal("previewed a missing file")
	}
}
