file(WRITE /dev/null "")
