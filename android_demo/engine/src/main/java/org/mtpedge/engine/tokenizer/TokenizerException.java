package org.mtpedge.engine.tokenizer;

/** A tokenizer.json this app cannot use, or text it cannot encode; the message names the problem. */
public class TokenizerException extends RuntimeException {
    public TokenizerException(String message) {
        super(message);
    }
}
