"""The one text engine: how chorus reads what people wrote.

Every text view (the digest's term model, titles and keyphrases, recaps, the context)
reads words through here, one module per job: `lines` (cut a text, count a noun, the
`[sender] text` line), `ids` (ids out, addresses as names), `cleaning` (the transcript
cleaner), `sentences` (split, rough pieces, decisions), `words` (stopwords, content and
term words), `keyphrases` (bounded space-saving counts) and `titles`. Pure and
deterministic; the keyphrase counts are bounded so a channel of any length keeps a record
of fixed size. A caller imports each name from the module that owns it.
"""
