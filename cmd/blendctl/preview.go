package main

import (
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"strings"
)

// previewColumns is the width of a terminal preview, in characters.
const previewColumns = 64

// preview draws a PNG in the terminal with 24-bit colour half blocks (two
// pixels per character: the upper half block in the top pixel's colour on
// the bottom pixel's colour).
func preview(out io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return fmt.Errorf("preview %s: %w", path, err)
	}
	b := img.Bounds()
	cols := min(previewColumns, b.Dx())
	// Terminal cells are about twice as tall as wide: a cell holds two rows.
	rows := max(1, b.Dy()*cols/b.Dx()/2)
	var s strings.Builder
	for y := 0; y < rows; y++ {
		for x := 0; x < cols; x++ {
			tr, tg, tb := sample(img, b, x, 2*y, cols, 2*rows)
			br, bg, bb := sample(img, b, x, 2*y+1, cols, 2*rows)
			fmt.Fprintf(&s, "\x1b[38;2;%d;%d;%dm\x1b[48;2;%d;%d;%dm▀", tr, tg, tb, br, bg, bb)
		}
		s.WriteString("\x1b[0m\n")
	}
	_, err = io.WriteString(out, s.String())
	return err
}

// sample is the colour of cell (x, y) of a cols × rows grid over the image,
// nearest pixel, alpha over black.
func sample(img image.Image, b image.Rectangle, x, y, cols, rows int) (uint8, uint8, uint8) {
	px := b.Min.X + (2*x+1)*b.Dx()/(2*cols)
	py := b.Min.Y + (2*y+1)*b.Dy()/(2*rows)
	r, g, bl, _ := img.At(px, py).RGBA() // premultiplied: over black already
	return uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)
}
