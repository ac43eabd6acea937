// TODO: minify
