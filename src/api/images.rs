//! Image parts of recorded messages, in each dialect's form. OpenAI chat writes an image as
//! an `image_url` part (`{"type":"image_url","image_url":{"url":...}}`, a `data:` URL for
//! inline bytes); Anthropic Messages as an `image` block whose `source` is `base64`
//! (`media_type`, `data`) or `url`. A record's messages are sent with its images in the form
//! of the dialect it is sent in, whichever form the trace wrote them in.

use std::borrow::Cow;

use serde_json::{json, Value};

/// An `image_url` part as an Anthropic `image` block; None for any other part.
fn to_anthropic(part: &Value) -> Option<Value> {
    if part.get("type")? != "image_url" {
        return None;
    }
    let url = match &part["image_url"] {
        Value::String(url) => url.as_str(),
        other => other.get("url")?.as_str()?,
    };
    let source = match url
        .strip_prefix("data:")
        .and_then(|d| d.split_once(";base64,"))
    {
        Some((media_type, data)) => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
        None => json!({"type": "url", "url": url}),
    };
    Some(json!({"type": "image", "source": source}))
}

/// An Anthropic `image` block as an `image_url` part; None for any other part.
fn to_openai(part: &Value) -> Option<Value> {
    if part.get("type")? != "image" {
        return None;
    }
    let source = &part["source"];
    let url = match source["type"].as_str()? {
        "base64" => format!(
            "data:{};base64,{}",
            source["media_type"].as_str()?,
            source["data"].as_str()?
        ),
        "url" => source["url"].as_str()?.to_string(),
        _ => return None,
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// Converts the image parts of `messages` in place with `convert`; whether any was.
fn convert_all(messages: &mut [Value], convert: fn(&Value) -> Option<Value>) -> bool {
    let mut any = false;
    for m in messages {
        for part in m
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(converted) = convert(part) {
                *part = converted;
                any = true;
            }
        }
    }
    any
}

/// Anthropic-form messages with their images as Anthropic blocks.
pub fn for_anthropic(messages: &mut [Value]) {
    convert_all(messages, to_anthropic);
}

/// `messages` with their images as OpenAI parts: borrowed as they are when none needs it.
pub fn for_openai(messages: &[Value]) -> Cow<'_, [Value]> {
    let needs = messages.iter().any(|m| {
        m["content"]
            .as_array()
            .is_some_and(|parts| parts.iter().any(|p| p["type"] == "image"))
    });
    if !needs {
        return Cow::Borrowed(messages);
    }
    let mut owned = messages.to_vec();
    convert_all(&mut owned, to_openai);
    Cow::Owned(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_go_over_in_each_form_and_back() {
        let inline =
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR="}});
        let linked = json!({"type": "image_url", "image_url": "https://example.com/cat.png"});
        let a = to_anthropic(&inline).unwrap();
        assert_eq!(
            a,
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR="}})
        );
        assert_eq!(to_openai(&a).unwrap(), inline);
        let b = to_anthropic(&linked).unwrap();
        assert_eq!(
            b["source"],
            json!({"type": "url", "url": "https://example.com/cat.png"})
        );
        assert_eq!(
            to_openai(&b).unwrap()["image_url"]["url"],
            "https://example.com/cat.png"
        );
        let text = json!({"type": "text", "text": "hi"});
        assert_eq!((to_anthropic(&text), to_openai(&text)), (None, None));
        // Whole messages: only the image parts change, and none is copied without one.
        let mut messages = vec![json!({"role": "user", "content": [text.clone(), inline.clone()]})];
        assert!(matches!(for_openai(&messages), Cow::Borrowed(_)));
        for_anthropic(&mut messages);
        assert_eq!(messages[0]["content"][0], text);
        assert_eq!(messages[0]["content"][1], a);
        assert_eq!(for_openai(&messages)[0]["content"][1], inline);
    }
}
