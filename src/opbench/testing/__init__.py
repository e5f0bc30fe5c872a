"""Study aids: code that changes what is measured on purpose, to measure the suite itself. Only
the scripts under studies/ and the unit tests load it; nothing in the measuring path imports it."""
